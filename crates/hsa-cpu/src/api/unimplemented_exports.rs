//! The exported trampolines of the entries we do not implement. Every other
//! function ROCr exports is still exported (version ROCR_1) and still calls
//! through the served table, so a tool can implement or wrap it; by default
//! its entry holds a stub. These trampolines are a three-instruction tail
//! jump (arguments untouched) through their slot, resolved by the
//! constructor in `api` (before any caller can run: the runtime's own
//! constructors run before those of the libraries that need it). Owns the
//! list of those functions and their slots.

use crate::api::slots::{STUB_WORD, index_of, unresolved};
use hsa::versions::Table;
use std::sync::atomic::AtomicPtr;

macro_rules! jump_exports {
    ($( $table:ident . $field:ident => $name:ident ; )*) => {
        /// Every jump export: table, entry name, symbol.
        pub(crate) const JUMPS: &[(Table, &str, &str)] = &[
            $( (table_of!($table), stringify!($field), stringify!($name)), )*
        ];

        /// The slot of every jump export, in declaration order.
        pub(crate) static JUMP_SLOTS: [AtomicPtr<usize>; JUMPS.len()] =
            [const { unresolved(&STUB_WORD) }; JUMPS.len()];

        $(
            std::arch::global_asm!(
                concat!(".globl ", stringify!($name)),
                concat!(".type ", stringify!($name), ",@function"),
                concat!(stringify!($name), ":"),
                "mov rax, qword ptr [rip + {slots}@GOTPCREL]",
                "mov rax, qword ptr [rax + {at}]",
                "jmp qword ptr [rax]",
                concat!(".size ", stringify!($name), ", . - ", stringify!($name)),
                concat!(".symver ", stringify!($name), ", ", stringify!($name), "@@@ROCR_1"),
                slots = sym JUMP_SLOTS,
                at = const 8 * index_of(JUMPS, stringify!($name)),
            );
        )*
    };
}

jump_exports! {
    core.hsa_system_extension_supported_fn => hsa_system_extension_supported;
    core.hsa_system_get_extension_table_fn => hsa_system_get_extension_table;
    core.hsa_soft_queue_create_fn => hsa_soft_queue_create;
    core.hsa_queue_inactivate_fn => hsa_queue_inactivate;
    core.hsa_agent_iterate_regions_fn => hsa_agent_iterate_regions;
    core.hsa_region_get_info_fn => hsa_region_get_info;
    core.hsa_agent_get_exception_policies_fn => hsa_agent_get_exception_policies;
    core.hsa_agent_extension_supported_fn => hsa_agent_extension_supported;
    core.hsa_memory_register_fn => hsa_memory_register;
    core.hsa_memory_deregister_fn => hsa_memory_deregister;
    core.hsa_memory_allocate_fn => hsa_memory_allocate;
    core.hsa_memory_assign_agent_fn => hsa_memory_assign_agent;
    core.hsa_isa_from_name_fn => hsa_isa_from_name;
    core.hsa_isa_get_info_fn => hsa_isa_get_info;
    core.hsa_isa_compatible_fn => hsa_isa_compatible;
    core.hsa_code_object_serialize_fn => hsa_code_object_serialize;
    core.hsa_code_object_deserialize_fn => hsa_code_object_deserialize;
    core.hsa_code_object_destroy_fn => hsa_code_object_destroy;
    core.hsa_code_object_get_info_fn => hsa_code_object_get_info;
    core.hsa_code_object_get_symbol_fn => hsa_code_object_get_symbol;
    core.hsa_code_symbol_get_info_fn => hsa_code_symbol_get_info;
    core.hsa_code_object_iterate_symbols_fn => hsa_code_object_iterate_symbols;
    core.hsa_executable_create_fn => hsa_executable_create;
    core.hsa_executable_load_code_object_fn => hsa_executable_load_code_object;
    core.hsa_executable_get_info_fn => hsa_executable_get_info;
    core.hsa_executable_global_variable_define_fn => hsa_executable_global_variable_define;
    core.hsa_executable_agent_global_variable_define_fn => hsa_executable_agent_global_variable_define;
    core.hsa_executable_readonly_variable_define_fn => hsa_executable_readonly_variable_define;
    core.hsa_executable_validate_fn => hsa_executable_validate;
    core.hsa_executable_get_symbol_fn => hsa_executable_get_symbol;
    core.hsa_extension_get_name_fn => hsa_extension_get_name;
    core.hsa_system_major_extension_supported_fn => hsa_system_major_extension_supported;
    core.hsa_agent_major_extension_supported_fn => hsa_agent_major_extension_supported;
    core.hsa_cache_get_info_fn => hsa_cache_get_info;
    core.hsa_agent_iterate_caches_fn => hsa_agent_iterate_caches;
    core.hsa_signal_group_create_fn => hsa_signal_group_create;
    core.hsa_signal_group_destroy_fn => hsa_signal_group_destroy;
    core.hsa_signal_group_wait_any_scacquire_fn => hsa_signal_group_wait_any_scacquire;
    core.hsa_signal_group_wait_any_relaxed_fn => hsa_signal_group_wait_any_relaxed;
    core.hsa_isa_get_exception_policies_fn => hsa_isa_get_exception_policies;
    core.hsa_isa_get_round_method_fn => hsa_isa_get_round_method;
    core.hsa_wavefront_get_info_fn => hsa_wavefront_get_info;
    core.hsa_isa_iterate_wavefronts_fn => hsa_isa_iterate_wavefronts;
    core.hsa_code_object_get_symbol_from_name_fn => hsa_code_object_get_symbol_from_name;
    core.hsa_code_object_reader_create_from_file_fn => hsa_code_object_reader_create_from_file;
    core.hsa_executable_load_program_code_object_fn => hsa_executable_load_program_code_object;
    core.hsa_executable_validate_alt_fn => hsa_executable_validate_alt;
    core.hsa_executable_iterate_agent_symbols_fn => hsa_executable_iterate_agent_symbols;
    core.hsa_executable_iterate_program_symbols_fn => hsa_executable_iterate_program_symbols;
    // Deprecated HSA 1.0 names: same slots as their sc* successors (as ROCr).
    core.hsa_queue_load_read_index_scacquire_fn => hsa_queue_load_read_index_acquire;
    core.hsa_queue_load_write_index_scacquire_fn => hsa_queue_load_write_index_acquire;
    core.hsa_queue_store_write_index_screlease_fn => hsa_queue_store_write_index_release;
    core.hsa_queue_cas_write_index_scacq_screl_fn => hsa_queue_cas_write_index_acq_rel;
    core.hsa_queue_cas_write_index_scacquire_fn => hsa_queue_cas_write_index_acquire;
    core.hsa_queue_cas_write_index_screlease_fn => hsa_queue_cas_write_index_release;
    core.hsa_queue_add_write_index_scacq_screl_fn => hsa_queue_add_write_index_acq_rel;
    core.hsa_queue_add_write_index_scacquire_fn => hsa_queue_add_write_index_acquire;
    core.hsa_queue_add_write_index_screlease_fn => hsa_queue_add_write_index_release;
    core.hsa_queue_store_read_index_screlease_fn => hsa_queue_store_read_index_release;
    core.hsa_signal_load_scacquire_fn => hsa_signal_load_acquire;
    core.hsa_signal_store_screlease_fn => hsa_signal_store_release;
    core.hsa_signal_wait_scacquire_fn => hsa_signal_wait_acquire;
    core.hsa_signal_and_scacquire_fn => hsa_signal_and_acquire;
    core.hsa_signal_and_screlease_fn => hsa_signal_and_release;
    core.hsa_signal_and_scacq_screl_fn => hsa_signal_and_acq_rel;
    core.hsa_signal_or_scacquire_fn => hsa_signal_or_acquire;
    core.hsa_signal_or_screlease_fn => hsa_signal_or_release;
    core.hsa_signal_or_scacq_screl_fn => hsa_signal_or_acq_rel;
    core.hsa_signal_xor_scacquire_fn => hsa_signal_xor_acquire;
    core.hsa_signal_xor_screlease_fn => hsa_signal_xor_release;
    core.hsa_signal_xor_scacq_screl_fn => hsa_signal_xor_acq_rel;
    core.hsa_signal_exchange_scacquire_fn => hsa_signal_exchange_acquire;
    core.hsa_signal_exchange_screlease_fn => hsa_signal_exchange_release;
    core.hsa_signal_exchange_scacq_screl_fn => hsa_signal_exchange_acq_rel;
    core.hsa_signal_add_scacquire_fn => hsa_signal_add_acquire;
    core.hsa_signal_add_screlease_fn => hsa_signal_add_release;
    core.hsa_signal_add_scacq_screl_fn => hsa_signal_add_acq_rel;
    core.hsa_signal_subtract_scacquire_fn => hsa_signal_subtract_acquire;
    core.hsa_signal_subtract_screlease_fn => hsa_signal_subtract_release;
    core.hsa_signal_subtract_scacq_screl_fn => hsa_signal_subtract_acq_rel;
    core.hsa_signal_cas_scacquire_fn => hsa_signal_cas_acquire;
    core.hsa_signal_cas_screlease_fn => hsa_signal_cas_release;
    core.hsa_signal_cas_scacq_screl_fn => hsa_signal_cas_acq_rel;
    amd.hsa_amd_coherency_get_type_fn => hsa_amd_coherency_get_type;
    amd.hsa_amd_coherency_set_type_fn => hsa_amd_coherency_set_type;
    amd.hsa_amd_profiling_async_copy_enable_fn => hsa_amd_profiling_async_copy_enable;
    amd.hsa_amd_profiling_get_async_copy_time_fn => hsa_amd_profiling_get_async_copy_time;
    amd.hsa_amd_profiling_convert_tick_to_system_domain_fn => hsa_amd_profiling_convert_tick_to_system_domain;
    amd.hsa_amd_async_function_fn => hsa_amd_async_function;
    amd.hsa_amd_queue_cu_set_mask_fn => hsa_amd_queue_cu_set_mask;
    amd.hsa_amd_memory_pool_can_migrate_fn => hsa_amd_memory_pool_can_migrate;
    amd.hsa_amd_memory_migrate_fn => hsa_amd_memory_migrate;
    amd.hsa_amd_memory_fill_fn => hsa_amd_memory_fill;
    amd.hsa_amd_interop_map_buffer_fn => hsa_amd_interop_map_buffer;
    amd.hsa_amd_interop_unmap_buffer_fn => hsa_amd_interop_unmap_buffer;
    amd.hsa_amd_image_create_fn => hsa_amd_image_create;
    amd.hsa_amd_pointer_info_set_userdata_fn => hsa_amd_pointer_info_set_userdata;
    amd.hsa_amd_ipc_signal_create_fn => hsa_amd_ipc_signal_create;
    amd.hsa_amd_ipc_signal_attach_fn => hsa_amd_ipc_signal_attach;
    amd.hsa_amd_queue_set_priority_fn => hsa_amd_queue_set_priority;
    amd.hsa_amd_memory_async_copy_rect_fn => hsa_amd_memory_async_copy_rect;
    amd.hsa_amd_runtime_queue_create_register_fn => hsa_amd_runtime_queue_create_register;
    amd.hsa_amd_register_deallocation_callback_fn => hsa_amd_register_deallocation_callback;
    amd.hsa_amd_deregister_deallocation_callback_fn => hsa_amd_deregister_deallocation_callback;
    amd.hsa_amd_signal_value_pointer_fn => hsa_amd_signal_value_pointer;
    amd.hsa_amd_svm_attributes_set_fn => hsa_amd_svm_attributes_set;
    amd.hsa_amd_svm_attributes_get_fn => hsa_amd_svm_attributes_get;
    amd.hsa_amd_svm_prefetch_async_fn => hsa_amd_svm_prefetch_async;
    amd.hsa_amd_queue_cu_get_mask_fn => hsa_amd_queue_cu_get_mask;
    // Added after ROCm 5.2 (HIP 6.4 and 7.2 link against them): served where
    // the served release has the entry, a stub otherwise.
    amd.hsa_amd_spm_acquire_fn => hsa_amd_spm_acquire;
    amd.hsa_amd_spm_release_fn => hsa_amd_spm_release;
    amd.hsa_amd_spm_set_dest_buffer_fn => hsa_amd_spm_set_dest_buffer;
    amd.hsa_amd_portable_export_dmabuf_fn => hsa_amd_portable_export_dmabuf;
    amd.hsa_amd_portable_close_dmabuf_fn => hsa_amd_portable_close_dmabuf;
    amd.hsa_amd_queue_get_info_fn => hsa_amd_queue_get_info;
    amd.hsa_amd_signal_wait_all_fn => hsa_amd_signal_wait_all;
    amd.hsa_amd_portable_export_dmabuf_v2_fn => hsa_amd_portable_export_dmabuf_v2;
    amd.hsa_amd_ais_file_write_fn => hsa_amd_ais_file_write;
    amd.hsa_amd_ais_file_read_fn => hsa_amd_ais_file_read;
    // The image extension (ROCr exports it from the runtime; our agents
    // have no images).
    image.hsa_ext_image_get_capability_fn => hsa_ext_image_get_capability;
    image.hsa_ext_image_data_get_info_fn => hsa_ext_image_data_get_info;
    image.hsa_ext_image_create_fn => hsa_ext_image_create;
    image.hsa_ext_image_import_fn => hsa_ext_image_import;
    image.hsa_ext_image_export_fn => hsa_ext_image_export;
    image.hsa_ext_image_copy_fn => hsa_ext_image_copy;
    image.hsa_ext_image_clear_fn => hsa_ext_image_clear;
    image.hsa_ext_image_destroy_fn => hsa_ext_image_destroy;
    image.hsa_ext_sampler_create_fn => hsa_ext_sampler_create;
    image.hsa_ext_sampler_destroy_fn => hsa_ext_sampler_destroy;
    image.hsa_ext_image_get_capability_with_layout_fn => hsa_ext_image_get_capability_with_layout;
    image.hsa_ext_image_data_get_info_with_layout_fn => hsa_ext_image_data_get_info_with_layout;
    image.hsa_ext_image_create_with_layout_fn => hsa_ext_image_create_with_layout;
    image.hsa_ext_sampler_create_v2_fn => hsa_ext_sampler_create_v2;
}
