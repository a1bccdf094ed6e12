//! The ranks of a job of `--world-size W`: each worker holds a set of ranks,
//! one per device, while it is live; a rank whose worker went silent past
//! the lease timeout goes to the next worker that asks. The ranks a worker
//! holds need not follow each other: a worker of `D` devices takes any `D`
//! free ranks (a run of consecutive ones where there is one), so that it
//! never waits while as many ranks as it has devices are free. Device `i`
//! of a worker trains the `i`-th of its ranks, in ascending order; the
//! worker is leased only the tasks of its ranks' lanes
//! ([`super::Lanes::of_ranks`]).

use serde::{Deserialize, Serialize};

/// The ranks of a world a worker took, one per device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RanksWire")]
pub struct Ranks {
    /// The ranks held, ascending: device `i` trains the `i`-th.
    pub ranks: Vec<u32>,
    /// Ranks in the world (`--world-size`).
    pub world: u32,
}

/// What a worker that asks for ranks is told ([`super::Queue::take_ranks`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", from = "ReplyWire")]
pub enum RanksReply {
    /// The ranks it took.
    Taken(Ranks),
    /// Fewer ranks are free than it has devices: it asks again later.
    Wait {
        /// Ranks no live worker holds.
        free: u32,
        /// Ranks in the world (`--world-size`).
        world: u32,
    },
    /// The job has no world (no `--world-size`).
    NoWorld,
    /// The job is over: the worker has nothing to take ranks for.
    JobOver,
}

/// [`RanksReply`] as it is read: as it is written, or as older masters
/// answered (the ranks taken, or `null` while none were free).
#[derive(Deserialize)]
#[serde(untagged)]
enum ReplyWire {
    Tagged(Tagged),
    Older(Option<Ranks>),
}

/// [`RanksReply`] as it is written.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Tagged {
    Taken(Ranks),
    Wait { free: u32, world: u32 },
    NoWorld,
    JobOver,
}

impl From<ReplyWire> for RanksReply {
    fn from(wire: ReplyWire) -> Self {
        match wire {
            ReplyWire::Tagged(Tagged::Taken(ranks)) | ReplyWire::Older(Some(ranks)) => {
                RanksReply::Taken(ranks)
            }
            ReplyWire::Tagged(Tagged::Wait { free, world }) => RanksReply::Wait { free, world },
            ReplyWire::Tagged(Tagged::NoWorld) | ReplyWire::Older(None) => RanksReply::NoWorld,
            ReplyWire::Tagged(Tagged::JobOver) => RanksReply::JobOver,
        }
    }
}

/// [`Ranks`] as they are read: a set, or a run of consecutive ranks as
/// masters wrote them before a worker's ranks could lie apart.
#[derive(Deserialize)]
#[serde(untagged)]
enum RanksWire {
    Set { ranks: Vec<u32>, world: u32 },
    Run { first: u32, count: u32, world: u32 },
}

impl From<RanksWire> for Ranks {
    fn from(wire: RanksWire) -> Self {
        match wire {
            RanksWire::Set { ranks, world } => Ranks {
                ranks: ascending(ranks),
                world,
            },
            RanksWire::Run {
                first,
                count,
                world,
            } => Ranks {
                ranks: (first..first.saturating_add(count)).collect(),
                world,
            },
        }
    }
}

/// `ranks` ascending, each once.
fn ascending(mut ranks: Vec<u32>) -> Vec<u32> {
    ranks.sort_unstable();
    ranks.dedup();
    ranks
}

/// `count` ranks of `world` that none of `held` holds: the first run of
/// consecutive free ranks where there is one, else the lowest free ranks;
/// `None` while fewer are free.
pub(super) fn free_ranks(held: &[u32], world: u32, count: u32) -> Option<Vec<u32>> {
    let free: Vec<u32> = (0..world).filter(|r| !held.contains(r)).collect();
    let count = count as usize;
    if count == 0 || free.len() < count {
        return None;
    }
    let run = free
        .windows(count)
        .find(|w| w[count - 1] - w[0] == count as u32 - 1);
    Some(run.unwrap_or(&free[..count]).to_vec())
}

/// How a worker's record keeps its ranks in the queue's snapshots:
/// `{"set": [..]}`; snapshots written before ranks could lie apart hold a
/// run `[first, count]`, read as its ranks.
pub(super) mod held {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Held {
        Set { set: Vec<u32> },
        Run(u32, u32),
    }

    /// Writes `ranks` as `{"set": [..]}`.
    pub fn serialize<S: Serializer>(ranks: &Option<Vec<u32>>, to: S) -> Result<S::Ok, S::Error> {
        ranks
            .as_ref()
            .map(|set| Held::Set { set: set.clone() })
            .serialize(to)
    }

    /// Reads either form.
    pub fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<Option<Vec<u32>>, D::Error> {
        Ok(Option::<Held>::deserialize(from)?.map(|held| match held {
            Held::Set { set } => super::ascending(set),
            Held::Run(first, count) => (first..first.saturating_add(count)).collect(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::{free_ranks, Ranks, RanksReply};

    #[test]
    fn a_worker_takes_a_free_run_else_any_free_ranks() {
        assert_eq!(free_ranks(&[], 3, 2), Some(vec![0, 1]));
        assert_eq!(free_ranks(&[0, 1], 3, 1), Some(vec![2]));
        assert_eq!(free_ranks(&[0], 3, 2), Some(vec![1, 2]));
        assert_eq!(free_ranks(&[1], 3, 2), Some(vec![0, 2]));
        assert_eq!(free_ranks(&[1, 2], 3, 2), None);
        assert_eq!(free_ranks(&[], 2, 3), None);
        // 1, 4 and 5 free of 6: a worker of 3 devices takes them all, and
        // one of 2 the run 4, 5.
        let held = [0, 2, 3];
        assert_eq!(free_ranks(&held, 6, 3), Some(vec![1, 4, 5]));
        assert_eq!(free_ranks(&held, 6, 2), Some(vec![4, 5]));
    }

    #[test]
    fn ranks_read_as_a_set_or_as_the_run_older_masters_wrote() {
        let old: Ranks =
            serde_json::from_str(r#"{"first":2,"count":3,"world":6}"#).expect("the old form");
        assert_eq!(
            old,
            Ranks {
                ranks: vec![2, 3, 4],
                world: 6
            }
        );
        let set = Ranks {
            ranks: vec![1, 4, 5],
            world: 6,
        };
        let json = serde_json::to_string(&set).expect("json");
        assert_eq!(json, r#"{"ranks":[1,4,5],"world":6}"#);
        assert_eq!(serde_json::from_str::<Ranks>(&json).ok(), Some(set));
    }

    #[test]
    fn a_reply_reads_back_and_reads_what_older_masters_sent() {
        let replies = [
            RanksReply::Taken(Ranks {
                ranks: vec![0, 3],
                world: 4,
            }),
            RanksReply::Wait { free: 1, world: 4 },
            RanksReply::NoWorld,
            RanksReply::JobOver,
        ];
        for reply in replies {
            let json = serde_json::to_string(&reply).expect("json");
            assert_eq!(serde_json::from_str::<RanksReply>(&json).ok(), Some(reply));
        }
        let old = r#"{"first":1,"count":2,"world":4}"#;
        assert_eq!(
            serde_json::from_str::<RanksReply>(old).ok(),
            Some(RanksReply::Taken(Ranks {
                ranks: vec![1, 2],
                world: 4
            }))
        );
        assert_eq!(
            serde_json::from_str::<RanksReply>("null").ok(),
            Some(RanksReply::NoWorld)
        );
    }

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Record {
        #[serde(default, skip_serializing_if = "Option::is_none", with = "super::held")]
        ranks: Option<Vec<u32>>,
    }

    #[test]
    fn a_record_keeps_a_set_and_reads_the_run_older_snapshots_hold() {
        let old: Record = serde_json::from_str(r#"{"ranks":[4,2]}"#).expect("the old form");
        assert_eq!(old.ranks, Some(vec![4, 5]));
        let set = Record {
            ranks: Some(vec![1, 4, 5]),
        };
        let json = serde_json::to_string(&set).expect("json");
        assert_eq!(json, r#"{"ranks":{"set":[1,4,5]}}"#);
        assert_eq!(serde_json::from_str::<Record>(&json).ok(), Some(set));
        let none: Record = serde_json::from_str("{}").expect("no ranks");
        assert_eq!(none.ranks, None);
    }
}
