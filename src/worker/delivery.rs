//! Delivery: batches on their way to the device threads, the one way the
//! shell hands them on. A batch waits here for room in its queue: the queue
//! all devices share, or, under `--shuffle global`, the queue of the device
//! it was dealt to; under `--lockstep` batches wait in steps of one batch per
//! device (see [`Stepper`]), each step sent whole once every device has room
//! for its batch. The shell waits on a [`Door`] (the queues the next batch
//! needs room in) and hands the [`Room`] it got back to [`Delivery::take`].

use std::collections::VecDeque;

use arrow::error::ArrowError;
use tokio::sync::mpsc;

use super::batcher::{self, OutBatch};
use super::devices::Queues;
use super::stepper::{Step, Stepper};
use crate::queue::AttemptId;

/// The senders of the device threads' queues.
#[derive(Debug)]
pub struct Lanes {
    /// The queue every device reads from (`None` under lockstep or
    /// `--shuffle global`).
    shared: Option<mpsc::Sender<OutBatch>>,
    /// Each device's own queue, in device order (else empty).
    own: Vec<mpsc::Sender<OutBatch>>,
}

impl Lanes {
    /// The device threads' queues for `devices` devices: each its own under
    /// lockstep (room for one batch: a step is sent whole once every device
    /// has room) and under `--shuffle global` (`dealt`: each batch goes to
    /// the device its number deals it to), else one for all. Their senders,
    /// and what the device threads read from.
    pub fn open(devices: usize, lockstep: bool, dealt: bool) -> (Lanes, Queues) {
        let devices = devices.max(1);
        if lockstep {
            let (own, rxs) = (0..devices).map(|_| mpsc::channel::<OutBatch>(1)).unzip();
            (Lanes { shared: None, own }, Queues::PerDevice(rxs))
        } else if dealt {
            let (own, rxs) = (0..devices).map(|_| mpsc::channel::<OutBatch>(2)).unzip();
            (Lanes { shared: None, own }, Queues::Dealt(rxs))
        } else {
            let (tx, rx) = mpsc::channel::<OutBatch>(devices * 2);
            let lanes = Lanes {
                shared: Some(tx),
                own: Vec::new(),
            };
            (lanes, Queues::Shared(rx))
        }
    }
}

/// Batches waiting for room in the device threads' queues (see the module
/// docs).
#[derive(Debug)]
pub struct Delivery {
    lanes: Lanes,
    /// Batches in the order they go, each with its device where dealt
    /// (`None`: the shared queue).
    waiting: VecDeque<(Option<usize>, OutBatch)>,
    /// Under lockstep: steps in the making, sent whole to every lane.
    stepper: Option<Stepper>,
    /// Reading pauses while this many batches wait.
    max: usize,
}

/// The queues the next batch (or step) needs room in, cloned so that the
/// shell is free while it waits.
#[derive(Debug)]
pub enum Door {
    /// Nothing to send, or no queue to send it to.
    Shut,
    /// One queue.
    One(mpsc::Sender<OutBatch>),
    /// Every device's queue (a step).
    All(Vec<mpsc::Sender<OutBatch>>),
}

/// Room for the next batch (or step), or the device threads are gone.
pub enum Room<'a> {
    /// Room in one queue.
    One(mpsc::Permit<'a, OutBatch>),
    /// Room in every device's queue.
    All(Vec<mpsc::Permit<'a, OutBatch>>),
    /// A queue closed: the device threads are gone (their events say why).
    Gone,
}

impl Door {
    /// Whether there is something to wait for.
    pub fn is_open(&self) -> bool {
        !matches!(self, Door::Shut)
    }

    /// Room for the next batch or step; never while shut.
    pub async fn room(&self) -> Room<'_> {
        match self {
            Door::Shut => std::future::pending().await,
            Door::One(tx) => tx.reserve().await.map_or(Room::Gone, Room::One),
            Door::All(txs) => {
                let mut permits = Vec::with_capacity(txs.len());
                for tx in txs {
                    match tx.reserve().await {
                        Ok(permit) => permits.push(permit),
                        Err(_) => return Room::Gone,
                    }
                }
                Room::All(permits)
            }
        }
    }
}

impl Delivery {
    /// Delivery through `lanes`, in steps where a stepper is given; reading
    /// pauses while `max` batches wait.
    pub fn new(lanes: Lanes, stepper: Option<Stepper>, max: usize) -> Delivery {
        Delivery {
            lanes,
            waiting: VecDeque::new(),
            stepper,
            max,
        }
    }

    /// Whether batches go in steps (`--lockstep`).
    pub fn in_steps(&self) -> bool {
        self.stepper.is_some()
    }

    /// A batch for whichever device is free (under lockstep, for the
    /// stepper).
    pub fn push(&mut self, out: OutBatch) {
        match &mut self.stepper {
            Some(stepper) => stepper.push(out),
            None => self.waiting.push_back((None, out)),
        }
    }

    /// A batch for `device` (under lockstep, for the stepper: the step
    /// decides the device).
    pub fn deal(&mut self, device: usize, out: OutBatch) {
        match &mut self.stepper {
            Some(stepper) => stepper.push(out),
            None => self.waiting.push_back((Some(device), out)),
        }
    }

    /// Device `i` trains world rank `ranks[i]` of a master's world: the
    /// steps the stepper forms say so.
    pub fn set_world_ranks(&mut self, ranks: &[u32]) {
        if let Some(stepper) = &mut self.stepper {
            stepper.set_world_ranks(ranks);
        }
    }

    /// A step cut whole already (global batches): under lockstep it goes as
    /// it is, else each batch to its device in step order (none of 0 rows).
    pub fn deal_step(&mut self, step: Step) {
        match &mut self.stepper {
            Some(stepper) => stepper.push_step(step),
            None => self.waiting.extend(
                step.batches
                    .into_iter()
                    .enumerate()
                    .filter(|(_, out)| out.data.num_rows() > 0)
                    .map(|(device, out)| (Some(device), out)),
            ),
        }
    }

    /// Batches dropped whole already (global batches, `--drop-last`, which
    /// comes with `--lockstep` only).
    pub fn dropped(&mut self, batches: Vec<OutBatch>) {
        if let Some(stepper) = &mut self.stepper {
            stepper.push_dropped(batches);
        }
    }

    /// Whether enough waits that no more should join for now. Under
    /// lockstep only while a step can go: rows that wait for more rows (to
    /// make a step) never count.
    pub fn full(&self) -> bool {
        match &self.stepper {
            Some(stepper) => stepper.ready() && stepper.held() >= self.max,
            None => self.waiting.len() >= self.max,
        }
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.stepper.as_ref().is_none_or(Stepper::is_empty)
    }

    /// Under lockstep: whether rows wait for the end of their epoch.
    pub fn open(&self) -> bool {
        self.stepper.as_ref().is_some_and(Stepper::open)
    }

    /// Under lockstep: no more rows of the epochs held come now.
    pub fn end_epoch(&mut self) {
        if let Some(stepper) = &mut self.stepper {
            stepper.end_epoch();
        }
    }

    /// Batches `--drop-last` dropped since last asked.
    pub fn take_dropped(&mut self) -> Vec<OutBatch> {
        self.stepper
            .as_mut()
            .map(Stepper::take_dropped)
            .unwrap_or_default()
    }

    /// The queues the next batch or step waits for.
    pub fn door(&self) -> Door {
        if let Some(stepper) = &self.stepper {
            return if stepper.ready() && !self.lanes.own.is_empty() {
                Door::All(self.lanes.own.clone())
            } else {
                Door::Shut
            };
        }
        let tx = match self.waiting.front() {
            Some((None, _)) => self.lanes.shared.clone(),
            Some((Some(device), _)) => self.lanes.own.get(*device).cloned(),
            None => None,
        };
        tx.map_or(Door::Shut, Door::One)
    }

    /// What goes now that `room` is free: each batch with the permit to
    /// send it with. Where the device threads are gone, everything waiting
    /// is dropped.
    pub fn take<'a>(
        &mut self,
        room: Room<'a>,
    ) -> Result<Vec<(mpsc::Permit<'a, OutBatch>, OutBatch)>, ArrowError> {
        match room {
            Room::One(permit) => Ok(self
                .waiting
                .pop_front()
                .map(|(_, out)| (permit, out))
                .into_iter()
                .collect()),
            Room::All(permits) => {
                let step = self.stepper.as_mut().map(Stepper::next_step).transpose()?;
                Ok(match step.flatten() {
                    Some(Step { batches, .. }) => permits.into_iter().zip(batches).collect(),
                    None => Vec::new(),
                })
            }
            Room::Gone => {
                self.clear();
                Ok(Vec::new())
            }
        }
    }

    /// Drops the rows of `attempt` wherever they wait. Returns how many
    /// rows the stepper dropped.
    pub fn drop_attempt(&mut self, attempt: AttemptId) -> Result<usize, ArrowError> {
        let mut kept = VecDeque::with_capacity(self.waiting.len());
        for (device, out) in self.waiting.drain(..) {
            if let Some(out) = batcher::without(out, |a| a == attempt)? {
                kept.push_back((device, out));
            }
        }
        self.waiting = kept;
        match &mut self.stepper {
            Some(stepper) => stepper.drop_attempt(attempt),
            None => Ok(0),
        }
    }

    /// Drops everything waiting.
    pub fn clear(&mut self) {
        self.waiting.clear();
        if let Some(stepper) = &mut self.stepper {
            stepper.clear();
        }
    }

    /// Closes the device threads' queues: they end once they hand on what
    /// was sent.
    pub fn close(&mut self) {
        self.lanes.shared = None;
        self.lanes.own.clear();
    }
}
