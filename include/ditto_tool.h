/* The C surface of ditto's tool library (libditto.so).
 *
 * libditto.so is an HSA tool. Preloaded into an application
 * (LD_PRELOAD=.../libditto.so), it is found by the HSA runtime inside
 * hsa_init without any other variable, because it exports
 * HSA_AMD_TOOL_PRIORITY (ROCr scans every loaded library for that symbol);
 * naming it in HSA_TOOLS_LIB works as well. The runtime then calls OnLoad
 * with its live API table, and OnUnload at hsa_shut_down.
 *
 * In OnLoad the tool wraps, in that table: hsa_queue_create (every queue
 * becomes an intercept queue with ditto's packet callback),
 * hsa_amd_memory_pool_allocate/free (sizes of live allocations) and
 * hsa_executable_freeze (kernel objects → kernel names and argument layouts).
 * Dispatches of the target kernel are held behind a barrier until their
 * buffers have been handed to the collector; every other packet passes
 * through untouched.
 *
 * Configuration (read once, in OnLoad):
 *   DITTO_KERNEL      target kernel: mangled name, full demangled signature,
 *                     name with template arguments, or bare name. Exact
 *                     match only. Unset: the tool stays passive.
 *   DITTO_SOCKET      path of the collector's Unix socket.
 *   DITTO_ARG_TYPES   element types for kernels without C++ names, e.g.
 *                     "const f32*,f32*,i32".
 *   DITTO_RUN_NAME    label of this run (default: the process id).
 *   DITTO_TIMEOUT_MS  how long to wait for the collector (default 30000);
 *                     past it the tool releases everything and the
 *                     application runs on (fail-open).
 *   DITTO_LOG         off | error | warn | info | debug (default warn).
 */
#ifndef DITTO_TOOL_H
#define DITTO_TOOL_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque here; laid out as ROCm's hsa_api_trace.h HsaApiTable. */
typedef struct HsaApiTable HsaApiTable;

/* Priority among discovered tools (loaded after HSA_TOOLS_LIB entries). */
extern const uint32_t HSA_AMD_TOOL_PRIORITY;

/* Called by the runtime inside hsa_init, after agents exist. Returns false
 * (and changes nothing) when the table is older than the entries ditto
 * wraps. */
bool OnLoad(HsaApiTable* table, uint64_t runtime_version,
            uint64_t failed_tool_count, const char* const* failed_tool_names);

/* Called at hsa_shut_down: releases every held dispatch, says goodbye to
 * the collector. */
void OnUnload(void);

#ifdef __cplusplus
}
#endif

#endif /* DITTO_TOOL_H */
