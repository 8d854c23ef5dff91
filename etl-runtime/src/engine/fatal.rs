//! The first fatal error of a pipeline, and the wake-up it sends the run loop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_channel::Sender;

/// The first fatal error, and a wake-up for the run loop. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct FatalSlot(Arc<FatalInner>);

#[derive(Debug)]
struct FatalInner {
    flag: AtomicBool,
    message: Mutex<Option<String>>,
    wake: Sender<()>,
}

impl FatalSlot {
    pub(crate) fn report(&self, message: String) {
        tracing::error!(error = %message, "fatal error; the pipeline stops");
        let mut slot = self.0.message.lock().expect("fatal slot lock");
        if slot.is_none() {
            *slot = Some(message);
        }
        self.0.flag.store(true, Ordering::Release);
        let _ = self.0.wake.send(());
    }

    pub(crate) fn is_set(&self) -> bool {
        self.0.flag.load(Ordering::Acquire)
    }

    pub(crate) fn message(&self) -> Option<String> {
        self.0.message.lock().expect("fatal slot lock").clone()
    }
}

impl FatalSlot {
    pub(crate) fn new(wake: Sender<()>) -> FatalSlot {
        FatalSlot(Arc::new(FatalInner { flag: AtomicBool::new(false), message: Mutex::new(None), wake }))
    }
}
