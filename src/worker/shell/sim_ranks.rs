//! Seeds of the shell's simulation whose job is a master's of
//! `--world-size W` with `--global-batch-size G`: the splits cut into the
//! lanes of `G`, a roster of workers of one to three devices each whose
//! devices are the world's ranks, each worker leased only the tasks of its
//! ranks' lanes. Checked as the master answers: no worker is told to wait
//! for ranks while as many as it has devices are free. Checked as each
//! batch reaches a device: it says its rank (`sluice.rank`), one of its
//! worker's, the device's own, and holds only rows of that rank's lanes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use connectors::Split;
use rand_chacha::rand_core::RngCore;
use rand_chacha::ChaCha8Rng;

use super::sim_worker::{Row, SPLIT_IDS};
use crate::queue::{lane_count, Command, Lanes, QueueError, Ranks, RanksReply, Reply, WorkerId};
use crate::trainer::protocol::RANK_KEY;
use crate::worker::batcher::OutBatch;

/// A world seed's job: its lanes, world and window.
#[derive(Debug)]
pub(super) struct World {
    pub(super) lanes: Arc<Lanes>,
    lane_of: Vec<u32>,
    /// Ranks in the world: the devices of every name of the roster.
    pub(super) world: u32,
    /// `--global-batch-size`.
    pub(super) global: u64,
    /// `--shuffle-window` (rows of all lanes' windows together).
    pub(super) window: u64,
    /// Each task's rows of its split, `[start, end)`.
    pieces: Vec<(u64, u64)>,
    /// The devices of each name of the roster.
    pub(super) roster: Vec<u64>,
}

impl World {
    /// Splits of `rows` cut into lanes; a roster of `names` workers of one
    /// to three devices each (as many or not), whose devices, together,
    /// divide the lanes.
    pub(super) fn new(rng: &mut ChaCha8Rng, rows: &[u64], names: u64) -> World {
        let global = [48, 96][(rng.next_u64() % 2) as usize];
        let count = lane_count(global);
        let window = 100 + rng.next_u64() % 300;
        let window_rows = (window / u64::from(count)).max(1);
        let roster = loop {
            let roster: Vec<u64> = (0..names).map(|_| 1 + rng.next_u64() % 3).collect();
            if u64::from(count) % roster.iter().sum::<u64>() == 0 {
                break roster;
            }
        };
        let cut = crate::queue::cut_lanes(rows, count, window_rows);
        let lanes = Lanes {
            count,
            window_rows,
            rows: cut.iter().map(|&(_, s, e)| e - s).collect(),
            group: cut.iter().map(|&(g, _, _)| g).collect(),
            ..Lanes::default()
        };
        World {
            lane_of: lanes.lane_of(),
            lanes: Arc::new(lanes),
            world: roster.iter().sum::<u64>() as u32,
            global,
            window,
            pieces: cut.iter().map(|&(_, s, e)| (s, e)).collect(),
            roster,
        }
    }

    /// Each task's rows.
    pub(super) fn task_rows(&self) -> Vec<u64> {
        self.lanes.rows.clone()
    }

    /// The job's splits: `split` of each task's rows, the piece of its
    /// split it reads.
    pub(super) fn splits(&self, split: impl Fn(u64) -> Split) -> Vec<Split> {
        let piece = |&(s, e): &(u64, u64)| Split {
            window: Some((s, e)),
            ..split(e - s)
        };
        self.pieces.iter().map(piece).collect()
    }

    /// Rows `rows` of a batch that device `device` of a worker holding
    /// `ranks` got: the batch says a rank of the worker's, the device's
    /// (one of no rows too), and holds only rows of that rank's lanes.
    /// Rows read again for a restarted trainer (`replay`) are of the
    /// worker's lanes, and say the device's rank under lockstep, else none.
    pub(super) fn check_batch(
        &self,
        ranks: Option<Ranks>,
        device: usize,
        out: &OutBatch,
        rows: &[Row],
        replay: bool,
    ) -> Result<(), String> {
        let Some(ranks) = ranks else {
            return Err(format!("device {device} got {rows:?} before ranks"));
        };
        let said = out.data.schema().metadata().get(RANK_KEY).cloned();
        let own = ranks.ranks.get(device).copied();
        let held = match said.map(|r| r.parse::<u32>()) {
            Some(Ok(rank)) if Some(rank) == own && !replay => vec![rank],
            Some(Ok(rank)) if Some(rank) == own => ranks.ranks.clone(),
            None if replay => ranks.ranks.clone(),
            said => {
                return Err(format!(
                    "device {device} of ranks {ranks:?} got a batch of rank {said:?}"
                ))
            }
        };
        let lanes = self.lanes.of_rank_set(&held, self.world);
        for (epoch, id) in rows {
            let task = (id / SPLIT_IDS) as usize;
            let lane = self.lane_of[task];
            if !lanes.contains(&lane) {
                return Err(format!(
                    "row {id} of epoch {epoch} (lane {lane}) went to rank {held:?}, lanes {lanes:?}"
                ));
            }
        }
        Ok(())
    }
}

/// What the master told of ranks: each worker's, and the names whose
/// worker was refused a lease for want of them.
#[derive(Debug, Default)]
pub(super) struct RankBooks {
    pub(super) ranks: HashMap<WorkerId, Ranks>,
    names: HashMap<WorkerId, String>,
    lost: HashSet<String>,
}

impl RankBooks {
    /// What `reply` to `command` says of ranks; a worker told to wait
    /// while as many ranks are free as it has devices breaks a rule.
    pub(super) fn note(
        &mut self,
        command: &Command,
        reply: &Reply,
        seen: &mut HashSet<&'static str>,
    ) -> Result<(), String> {
        match (command, reply) {
            (
                Command::Register {
                    name: Some(name), ..
                },
                Reply::Register(worker),
            ) => {
                self.names.insert(*worker, name.clone());
            }
            (Command::TakeRanks { worker, .. }, Reply::Ranks(Ok(RanksReply::Taken(ranks)))) => {
                seen.insert("world: ranks taken");
                if ranks.ranks.windows(2).any(|w| w[1] != w[0] + 1) {
                    seen.insert("world: ranks taken that lie apart");
                }
                self.ranks.insert(*worker, ranks.clone());
                if self.names.get(worker).is_some_and(|n| self.lost.remove(n)) {
                    seen.insert("world: ranks lost to another worker and taken again");
                }
            }
            (
                Command::TakeRanks {
                    worker, devices, ..
                },
                Reply::Ranks(Ok(RanksReply::Wait { free, world })),
            ) => {
                seen.insert("world: no ranks free, the lease waits");
                if free >= devices {
                    return Err(format!(
                        "w{}: {free} of {world} ranks are free, but its {devices} devices wait",
                        worker.0
                    ));
                }
            }
            (Command::Lease { worker, .. }, Reply::Lease(Err(QueueError::NoRanks { .. }))) => {
                seen.insert("world: ranks lost to another worker");
                if let Some(name) = self.names.get(worker) {
                    self.lost.insert(name.clone());
                }
            }
            _ => {}
        }
        Ok(())
    }
}
