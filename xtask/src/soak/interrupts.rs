//! The soak's handling of SIGINT, SIGTERM and SIGHUP: counted rather than fatal, so that the
//! soak can thaw what it froze and stop the instances in order. Once ends the load phase early,
//! twice stops waiting for the check at the end, a third time thaws the servers and exits.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::signal::unix::{SignalKind, signal};

use super::setup;

/// How many of those signals arrived so far.
pub(super) struct Interrupts(Arc<AtomicU32>);

impl Interrupts {
    /// Installs the handlers (before it returns: from then on these signals no longer end the
    /// process by themselves) and counts the signals on a thread of its own.
    pub(super) fn watch() -> Interrupts {
        let count = Arc::new(AtomicU32::new(0));
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime,
            Err(e) => {
                eprintln!(
                    "soak: cannot handle signals ({e}): Ctrl-C ends the soak at once, frozen servers stay frozen"
                );
                return Interrupts(count);
            }
        };
        let streams: Vec<_> = {
            let _context = runtime.enter();
            [SignalKind::interrupt(), SignalKind::terminate(), SignalKind::hangup()]
                .into_iter()
                .filter_map(|kind| signal(kind).map_err(|e| eprintln!("soak: cannot handle signal {kind:?}: {e}")).ok())
                .collect()
        };
        let counted = count.clone();
        std::thread::spawn(move || {
            runtime.block_on(async move {
                let tasks: Vec<_> = streams
                    .into_iter()
                    .map(|mut stream| {
                        let counted = counted.clone();
                        tokio::spawn(async move {
                            while stream.recv().await.is_some() {
                                match counted.fetch_add(1, Ordering::SeqCst) + 1 {
                                    1 => eprintln!("soak: interrupted: ending the load phase, then the check"),
                                    2 => eprintln!("soak: interrupted again: not waiting for the check"),
                                    _ => abort(),
                                }
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    let _ = task.await;
                }
            });
        });
        Interrupts(count)
    }

    pub(super) fn count(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The third interrupt: thaws every server a fault may have stopped, and exits now.
fn abort() -> ! {
    for name in ["clickhouse", "clickhouse-2"].into_iter().chain(setup::BROKER_SERVICES) {
        if let Some(pid) = setup::server_pid(name) {
            let _ = super::signal("CONT", pid);
        }
    }
    eprintln!("soak: interrupted three times: exiting (pipeline instances may still run)");
    std::process::exit(130)
}
