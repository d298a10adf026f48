//! The generation queue: the LLM is one shared resource. At most `concurrency` answers generate
//! at once and at most `waiting` more wait; a request beyond that is refused at once (503 with
//! Retry-After) instead of piling up.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Admission and the generation slots (a clone is a handle on the same queue).
#[derive(Clone)]
pub struct Queue {
    admitted: Arc<AtomicUsize>,
    limit: usize,
    slots: Arc<Semaphore>,
    running: Arc<AtomicUsize>,
}

/// A place in the queue; dropping it leaves.
pub struct Ticket {
    admitted: Arc<AtomicUsize>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admitted.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A generation slot; dropping it frees the slot.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    running: Arc<AtomicUsize>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Queue {
    /// `concurrency` slots and `waiting` places in line.
    pub fn new(concurrency: usize, waiting: usize) -> Queue {
        Queue {
            admitted: Arc::default(),
            limit: concurrency.max(1) + waiting,
            slots: Arc::new(Semaphore::new(concurrency.max(1))),
            running: Arc::default(),
        }
    }

    /// A place, or `None` when every slot and place is taken.
    pub fn admit(&self) -> Option<Ticket> {
        let mut now = self.admitted.load(Ordering::SeqCst);
        loop {
            if now >= self.limit {
                return None;
            }
            match self.admitted.compare_exchange(now, now + 1, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return Some(Ticket { admitted: self.admitted.clone() }),
                Err(actual) => now = actual,
            }
        }
    }

    /// Waits for a generation slot.
    pub async fn slot(&self) -> Slot {
        let permit = self.slots.clone().acquire_owned().await.expect("the semaphore is never closed");
        self.running.fetch_add(1, Ordering::SeqCst);
        Slot { _permit: permit, running: self.running.clone() }
    }

    /// (waiting, generating).
    pub fn depth(&self) -> (usize, usize) {
        let running = self.running.load(Ordering::SeqCst);
        (self.admitted.load(Ordering::SeqCst).saturating_sub(running), running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_slots_plus_places() {
        let q = Queue::new(1, 1);
        let a = q.admit().unwrap();
        let _b = q.admit().unwrap();
        assert!(q.admit().is_none(), "full: the third is refused");
        drop(a);
        assert!(q.admit().is_some(), "a place freed is taken again");
    }
}
