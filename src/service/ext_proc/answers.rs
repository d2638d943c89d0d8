//! The answers of one stream, produced where they are read: the exchange runs inside the
//! response stream that tonic polls, not in a task of its own behind a channel. Each message
//! from Envoy then wakes one task (the stream's) instead of two, and no task is spawned per
//! HTTP request: a sixth of the authority's CPU per request went to
//! those wakeups and spawns.
//!
//! The stream is dropped when Envoy resets it or its connection closes (the client left, Envoy
//! died), possibly in the middle of a store call; [`super::Exchange`]'s `Drop` then ends what
//! the request holds, in a task of its own.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tonic::Status;

use crate::api::envoy::service::ext_proc::v3::ProcessingResponse;

type Item = Result<ProcessingResponse, Status>;

/// Where the exchange puts its answers; [`Answers`] hands them to tonic in order. Unbounded,
/// yet small: Envoy sends a message and waits for its answer, and each message has at most
/// two (an immediate response, then an error status).
#[derive(Clone, Default)]
pub(super) struct Outbox(Arc<Mutex<VecDeque<Item>>>);

impl Outbox {
    pub(super) fn push(&self, item: Item) {
        self.0.lock().expect("outbox lock").push_back(item);
    }

    fn pop(&self) -> Option<Item> {
        self.0.lock().expect("outbox lock").pop_front()
    }
}

/// The response stream of `Process`: polls the exchange, then yields what it answered.
pub struct Answers {
    exchange: Pin<Box<dyn Future<Output = ()> + Send>>,
    outbox: Outbox,
    done: bool,
}

impl Answers {
    pub(super) fn new(exchange: impl Future<Output = ()> + Send + 'static, outbox: Outbox) -> Self {
        Answers {
            exchange: Box::pin(exchange),
            outbox,
            done: false,
        }
    }
}

impl tokio_stream::Stream for Answers {
    type Item = Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        // The exchange is polled even with answers waiting: it is woken by Envoy's messages
        // and timers, and a poll it was not woken for only finds them not ready.
        if !self.done && self.exchange.as_mut().poll(cx).is_ready() {
            self.done = true;
        }
        match self.outbox.pop() {
            Some(item) => Poll::Ready(Some(item)),
            None if self.done => Poll::Ready(None),
            None => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_stream::{Stream, StreamExt};

    fn answer() -> Item {
        Ok(ProcessingResponse::default())
    }

    #[tokio::test]
    async fn yields_every_answer_in_order_then_ends_with_the_exchange() {
        let outbox = Outbox::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let out = outbox.clone();
        let mut answers = Answers::new(
            async move {
                out.push(answer());
                out.push(Err(Status::internal("second")));
                let _ = rx.await;
                out.push(Err(Status::internal("last")));
            },
            outbox,
        );
        assert!(answers.next().await.unwrap().is_ok());
        assert_eq!(
            answers.next().await.unwrap().unwrap_err().message(),
            "second"
        );
        tx.send(()).unwrap();
        assert_eq!(answers.next().await.unwrap().unwrap_err().message(), "last");
        assert!(answers.next().await.is_none());
    }

    #[tokio::test]
    async fn waits_for_the_exchange_while_it_has_nothing_to_say() {
        let mut answers = Answers::new(std::future::pending(), Outbox::default());
        let polled =
            std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut answers).poll_next(cx))).await;
        assert!(polled.is_pending(), "no answer, no end");
    }
}
