//! Compiles etcd's protobuf definitions (proto/etcd) into the etcd
//! backend's messages and gRPC clients. protox is a protobuf compiler
//! written in Rust, so a build needs nothing but cargo: no protoc, and
//! $PROTOC is never read.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    #[cfg(feature = "etcd")]
    {
        const ROOT: &str = "proto/etcd";
        println!("cargo:rerun-if-changed={ROOT}");
        let descriptors = protox::compile([format!("{ROOT}/rpc.proto")], [ROOT])?;
        tonic_prost_build::configure()
            .build_server(false)
            .build_transport(false)
            // Values reach the store as `Bytes`, without a copy.
            .bytes(".mvccpb.KeyValue.value")
            .compile_fds(descriptors)?;
    }
    Ok(())
}
