//! Writes a model topology: `write_topology DIR [GPUS]`.
fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().expect("usage: write_topology DIR [GPUS]");
    let gpus = args
        .next()
        .map_or(1, |g| g.parse().expect("GPUS is a number"));
    ditto_hsa_model::topology::Topology::for_this_machine(gpus)
        .write(std::path::Path::new(&dir))
        .expect("writing the topology");
}
