//! An S3-compatible object store on a local directory (s3s-fs), served on
//! a free loopback port from its own thread for a test's life: what a
//! BackupStorageLocation with provider `aws` and an `s3Url` talks to, as
//! MinIO would in Velero's own examples. A bucket is a directory under
//! the root.

use std::net::SocketAddr;
use std::path::Path;

pub struct S3Server {
    pub url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl S3Server {
    /// Serves `root` with one access key and its secret.
    pub fn start(root: &Path, access_key: &str, secret_key: &str) -> S3Server {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<SocketAddr>();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (dir, ak, sk) = (
            root.to_path_buf(),
            access_key.to_string(),
            secret_key.to_string(),
        );
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let fs = s3s_fs::FileSystem::new(dir).expect("s3s-fs root");
                let mut builder = s3s::service::S3ServiceBuilder::new(fs);
                builder.set_auth(s3s::auth::SimpleAuth::from_single(ak, sk));
                let service = builder.build();
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                ready_tx
                    .send(listener.local_addr().expect("address"))
                    .expect("ready");
                let http = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                let mut stopped = std::pin::pin!(stopped);
                loop {
                    let socket = tokio::select! {
                        accepted = listener.accept() => match accepted {
                            Ok((socket, _)) => socket,
                            Err(_) => continue,
                        },
                        _ = stopped.as_mut() => return,
                    };
                    let conn = http
                        .serve_connection(hyper_util::rt::TokioIo::new(socket), service.clone())
                        .into_owned();
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                }
            });
        });
        let addr = ready_rx.recv().expect("the S3 server started");
        S3Server {
            url: format!("http://{addr}"),
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
