//! A connection whose writes may not stall: a client that stops reading
//! (its socket buffer full for longer than the limit) gets an error on the
//! next write, and hyper drops the connection. What holds a live stream to
//! a client that reads too slowly, or a large answer to one that never
//! reads, is then bounded in time, and so in memory.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

pub(super) struct WriteDeadline<S> {
    inner: S,
    limit: Duration,
    /// Set while writes wait: when the wait started plus the limit.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteDeadline<S> {
    pub(super) fn new(inner: S, limit: Duration) -> WriteDeadline<S> {
        WriteDeadline { inner, limit, stalled: None }
    }

    /// A write that could not go on: pending until the limit, an error after.
    fn waiting<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let stalled = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client read nothing for {limit:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progress<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match polled {
            Poll::Pending => self.waiting(cx),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.progress(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.progress(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.progress(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_client_that_stops_reading_is_cut_off_and_a_slow_one_is_not() {
        let limit = Duration::from_secs(10);
        // A slow reader: 64 bytes every 5 s, within the limit each time.
        let (server, mut client) = tokio::io::duplex(64);
        let mut server = WriteDeadline::new(server, limit);
        let reader = tokio::spawn(async move {
            let mut buf = [0; 64];
            let mut got = 0;
            while got < 640 {
                tokio::time::sleep(Duration::from_secs(5)).await;
                got += client.read(&mut buf).await.unwrap();
            }
            client
        });
        server.write_all(&[7; 640]).await.expect("a slow reader is served");
        let _client = reader.await.unwrap();
        // A reader that stops: the write waits the limit, then fails.
        let (server, _client) = tokio::io::duplex(64);
        let mut server = WriteDeadline::new(server, limit);
        let started = tokio::time::Instant::now();
        let err = server.write_all(&[7; 640]).await.expect_err("a client that reads nothing");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= limit, "{:?}", started.elapsed());
    }
}
