//! Device threads: one OS thread per device, each owning a trainer, pulling
//! batches from one bounded queue and reporting acknowledged rows.

use crate::epoch::Epoch;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::mpsc;

use super::batcher::{self, OutBatch};
use super::checkpoints::Completed;
use super::{LeaseClock, Provenance};
use crate::protocol::Halt;
use crate::trainer::{Batch, Mark, MarkKind, Trainer, TrainerError, TrainerFactory};

/// What a device thread reports.
#[derive(Debug)]
pub enum DeviceEvent {
    /// A batch was applied by a trainer.
    Applied {
        /// The device.
        device: usize,
        /// Epoch of its rows.
        epoch: Epoch,
        /// Rows in it.
        rows: usize,
        /// Where they came from.
        provenance: Provenance,
    },
    /// The trainer said something besides acknowledging (checkpoints), in
    /// order with the `Applied` events of this device.
    Mark {
        /// The device.
        device: usize,
        /// What it said.
        kind: MarkKind,
    },
    /// The trainer failed; the job cannot go on.
    Failed {
        /// The device.
        device: usize,
        /// What went wrong.
        error: TrainerError,
    },
}

/// Where the device threads take their batches from.
pub enum Queues {
    /// One queue: each batch goes to whichever device takes it first.
    Shared(mpsc::Receiver<OutBatch>),
    /// One queue per device, in device order (`--lockstep`).
    PerDevice(Vec<mpsc::Receiver<OutBatch>>),
    /// One queue per device, in device order, each batch dealt to one
    /// device (`--shuffle global`); rows of lost leases are dropped as from
    /// the shared queue.
    Dealt(Vec<mpsc::Receiver<OutBatch>>),
}

/// What stops the device threads short of the end of their queue.
#[derive(Debug, Clone, Default)]
pub struct Brakes {
    /// Once set, no batch is handed to a trainer (nothing acknowledged could
    /// be committed).
    pub halt: Halt,
    /// Once set, every trainer is dropped (its process group killed) without
    /// the end of its stream: the worker rolls them back to their last
    /// complete checkpoint.
    pub abandon: Halt,
}

/// The running device threads.
pub struct Devices {
    handles: Vec<JoinHandle<()>>,
}

impl Devices {
    /// Starts `devices` threads reading from `batches`, each with its own
    /// trainer: one queue shared by all of them, or one queue per device
    /// (`--lockstep`: the pipeline hands out whole steps, and a device never
    /// drops a batch of its step, so every device is fed the same steps).
    pub fn start(
        factory: Arc<dyn TrainerFactory>,
        devices: usize,
        batches: Queues,
        events: mpsc::UnboundedSender<DeviceEvent>,
        lost: LeaseClock,
        brakes: Brakes,
        completed: Completed,
    ) -> Result<Devices, TrainerError> {
        let (queues, lockstep): (Vec<_>, bool) = match batches {
            Queues::Shared(rx) => (vec![Arc::new(Mutex::new(rx))], false),
            Queues::Dealt(rxs) => (
                rxs.into_iter().map(|rx| Arc::new(Mutex::new(rx))).collect(),
                false,
            ),
            Queues::PerDevice(rxs) => (
                rxs.into_iter().map(|rx| Arc::new(Mutex::new(rx))).collect(),
                true,
            ),
        };
        let mut handles = Vec::with_capacity(devices);
        for device in 0..devices {
            let trainer = factory.make(device, devices)?;
            let Some(rx) = queues.get(device).or(queues.first()).cloned() else {
                return Err(TrainerError::Io {
                    action: format!("find the batch queue of device {device}"),
                    cause: std::io::Error::other("no queue"),
                });
            };
            let tx = events.clone();
            let lost = (!lockstep).then(|| lost.clone());
            let halt = brakes.halt.clone();
            let abandon = brakes.abandon.clone();
            let completed = completed.clone();
            let handle = std::thread::Builder::new()
                .name(format!("sluice-device-{device}"))
                .spawn(move || {
                    device_loop(device, trainer, rx, tx, lost, [halt, abandon], completed)
                })
                .map_err(|source| TrainerError::Io {
                    action: format!("start the thread of device {device}"),
                    cause: source,
                })?;
            handles.push(handle);
        }
        Ok(Devices { handles })
    }

    /// Waits for every device thread to end.
    pub fn join(self) {
        for handle in self.handles {
            let _ = handle.join();
        }
    }
}

/// Batches handed to a trainer and not yet acknowledged, by sequence number.
struct InFlight {
    next_seq: u64,
    batches: HashMap<u64, (Epoch, usize, Provenance)>,
    /// Acknowledgements reported so far (what `Mark::after` counts).
    reported: u64,
    /// Marks not reported yet, oldest first.
    marks: std::collections::VecDeque<Mark>,
}

impl InFlight {
    /// Reports the applied `seqs` and the trainer's marks, each mark after
    /// the acknowledgements that came before it.
    fn report(
        &mut self,
        device: usize,
        seqs: Vec<u64>,
        marks: Vec<Mark>,
        tx: &mpsc::UnboundedSender<DeviceEvent>,
    ) {
        self.marks.extend(marks);
        for seq in seqs {
            self.report_marks(device, tx);
            self.reported += 1;
            if let Some((epoch, rows, provenance)) = self.batches.remove(&seq) {
                let _ = tx.send(DeviceEvent::Applied {
                    device,
                    epoch,
                    rows,
                    provenance,
                });
            }
        }
        self.report_marks(device, tx);
    }

    fn report_marks(&mut self, device: usize, tx: &mpsc::UnboundedSender<DeviceEvent>) {
        while self.marks.front().is_some_and(|m| m.after <= self.reported) {
            if let Some(mark) = self.marks.pop_front() {
                let _ = tx.send(DeviceEvent::Mark {
                    device,
                    kind: mark.kind,
                });
            }
        }
    }
}

/// Feeds one device's trainer. `lost` drops the rows of lost leases from a
/// batch before it is handed over; without it (`--lockstep`) every batch is
/// fed whole, as the other devices are fed the rest of its step. Once `halt`
/// is set no batch is handed over at all. Once `abandon` is set the trainer
/// is dropped (its process group killed) without the end of its stream, so
/// it writes no checkpoint after it: the worker rolls its trainers back to
/// their last complete checkpoint.
fn device_loop(
    device: usize,
    mut trainer: Box<dyn Trainer>,
    rx: Arc<Mutex<mpsc::Receiver<OutBatch>>>,
    tx: mpsc::UnboundedSender<DeviceEvent>,
    lost: Option<LeaseClock>,
    [halt, abandon]: [Halt; 2],
    completed: Completed,
) {
    let abandoned = || abandon.reason().is_some();
    let mut told = None;
    let mut inflight = InFlight {
        next_seq: 0,
        batches: HashMap::new(),
        reported: 0,
        marks: std::collections::VecDeque::new(),
    };
    let result = (|| -> Result<(), TrainerError> {
        loop {
            let done = trainer.make_room()?;
            inflight.report(device, done, trainer.take_marks(), &tx);
            let next = match try_next(&rx) {
                Some(item) => item,
                None => wait_next(device, trainer.as_mut(), &rx, &mut inflight, &tx)?,
            };
            let Some(out) = next else {
                break;
            };
            if abandoned() {
                return Ok(());
            }
            if halt.reason().is_some() {
                // Nothing acknowledged now could be committed.
                continue;
            }
            // Rows of a lease in doubt (lapsed by this worker's clock: the
            // master is unreachable, or the process was paused) wait for the
            // master's answer; meanwhile the trainer's acknowledgements of
            // what it holds still come in.
            if let Some(clock) = &lost {
                let held = Held {
                    clock,
                    abandon: &abandon,
                };
                if !held.wait(&out, device, trainer.as_mut(), &mut inflight, &tx)? {
                    return Ok(());
                }
            }
            // Rows of a lease lost while the batch waited in the queue are
            // served again elsewhere: no trainer sees them here.
            let Some(out) = without_dead(out, lost.as_ref())? else {
                continue;
            };
            let seq = inflight.next_seq;
            inflight.next_seq += 1;
            inflight
                .batches
                .insert(seq, (out.epoch, out.data.num_rows(), out.provenance));
            let done = trainer.feed(Batch {
                seq,
                epoch: out.epoch,
                data: completed.tag(out.data, &mut told),
            })?;
            inflight.report(device, done, trainer.take_marks(), &tx);
        }
        if abandoned() {
            return Ok(());
        }
        let done = trainer.finish()?;
        inflight.report(device, done, trainer.take_marks(), &tx);
        Ok(())
    })();
    if let Err(error) = result {
        trainer.set_idle(true);
        let _ = tx.send(DeviceEvent::Failed { device, error });
    }
}

/// `out` without the rows of dead leases (`None`: nothing left).
fn without_dead(
    out: OutBatch,
    lost: Option<&LeaseClock>,
) -> Result<Option<OutBatch>, TrainerError> {
    let dead = |a| lost.is_some_and(|l| l.is_dead(a));
    batcher::without(out, dead).map_err(|e| TrainerError::Io {
        action: "drop the rows of a lost lease".to_string(),
        cause: std::io::Error::other(e),
    })
}

/// Nothing queued: makes sure everything given so far is applied, reporting
/// each acknowledgement as it comes (so its rows are committed at once);
/// takes a batch as soon as one is queued, else waits idle. `None` when the
/// queue is closed.
fn wait_next(
    device: usize,
    trainer: &mut dyn Trainer,
    rx: &Arc<Mutex<mpsc::Receiver<OutBatch>>>,
    inflight: &mut InFlight,
    tx: &mpsc::UnboundedSender<DeviceEvent>,
) -> Result<Option<OutBatch>, TrainerError> {
    loop {
        let (done, all) = trainer.flush_some()?;
        inflight.report(device, done, trainer.take_marks(), tx);
        if all {
            break;
        }
        if let Some(item) = try_next(rx) {
            return Ok(item);
        }
    }
    trainer.set_idle(true);
    let item = blocking_next(rx);
    trainer.set_idle(false);
    Ok(item)
}

/// What holds back a batch with rows of a lease in doubt.
struct Held<'a> {
    clock: &'a LeaseClock,
    abandon: &'a Halt,
}

impl Held<'_> {
    /// Waits while `out` holds rows of a lease in doubt; meanwhile the
    /// trainer's acknowledgements of what it holds still come in. False
    /// when the trainer was abandoned meanwhile.
    fn wait(
        &self,
        out: &OutBatch,
        device: usize,
        trainer: &mut dyn Trainer,
        inflight: &mut InFlight,
        tx: &mpsc::UnboundedSender<DeviceEvent>,
    ) -> Result<bool, TrainerError> {
        let doubtful = |out: &OutBatch| {
            let now = std::time::Instant::now();
            out.provenance
                .iter()
                .any(|p| self.clock.in_doubt(p.attempt, now))
        };
        let mut pending = true;
        while doubtful(out) {
            if self.abandon.reason().is_some() {
                return Ok(false);
            }
            if pending {
                let (done, all) = trainer.flush_some()?;
                inflight.report(device, done, trainer.take_marks(), tx);
                pending = !all;
            } else {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        Ok(true)
    }
}

/// `Some(Some(batch))` when one is queued, `Some(None)` when the queue is closed, `None` when empty.
///
/// Never blocks: when another device thread holds the queue it is waiting for
/// data, so this one counts the queue as empty (and goes idle before waiting,
/// which keeps synchronous trainers from waiting on it).
fn try_next(rx: &Mutex<mpsc::Receiver<OutBatch>>) -> Option<Option<OutBatch>> {
    let mut guard = match rx.try_lock() {
        Ok(guard) => guard,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return None,
    };
    match guard.try_recv() {
        Ok(b) => Some(Some(b)),
        Err(mpsc::error::TryRecvError::Empty) => None,
        Err(mpsc::error::TryRecvError::Disconnected) => Some(None),
    }
}

fn blocking_next(rx: &Mutex<mpsc::Receiver<OutBatch>>) -> Option<OutBatch> {
    let mut guard = rx.lock().unwrap_or_else(|e| e.into_inner());
    guard.blocking_recv()
}
