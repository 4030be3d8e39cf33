//! A pass's per-object work run a few at a time: one after another, a
//! burst's pass lasted as long as all its round trips.

use futures::StreamExt;

/// Runs `work` at most `limit` at once; the first error, once all ran.
pub async fn all<F, E>(work: Vec<F>, limit: usize) -> Result<(), E>
where
    F: std::future::Future<Output = Result<(), E>>,
{
    let results: Vec<Result<(), E>> = futures::stream::iter(work)
        .buffer_unordered(limit.max(1))
        .collect()
        .await;
    results
        .into_iter()
        .find_map(Result::err)
        .map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn every_piece_runs_within_the_limit_and_an_error_is_returned() {
        let running = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let ran = AtomicUsize::new(0);
        let work: Vec<_> = (0..20)
            .map(|i| {
                let (running, most, ran) = (&running, &most, &ran);
                async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    ran.fetch_add(1, Ordering::SeqCst);
                    if i == 7 { Err(i) } else { Ok(()) }
                }
            })
            .collect();
        assert_eq!(all(work, 4).await, Err(7));
        assert_eq!(ran.load(Ordering::SeqCst), 20, "an error stops nothing");
        assert!(most.load(Ordering::SeqCst) <= 4);
        assert!(most.load(Ordering::SeqCst) > 1, "they overlap");
        assert_eq!(
            all(Vec::<std::future::Ready<Result<(), ()>>>::new(), 4).await,
            Ok(())
        );
    }
}
