//! `--lockstep` exec trainers: the device processes of one worker are one
//! `torch.distributed` group. Each gets its rank, the group's size and a
//! rendezvous address on this machine. A group cannot go on without one of
//! its processes, so a process that dies is not restarted: its death (or any
//! failure of a trainer of the group) stops every process of the group, and
//! the run fails naming the first failure.

use std::net::{Ipv4Addr, TcpListener};
use std::sync::Mutex;

pub use super::protocol::LOCKSTEP_ENV;

/// The address `torch.distributed` rendezvous at (`MASTER_ADDR`).
const MASTER_ADDR: &str = "127.0.0.1";

/// The device processes of one worker under `--lockstep`.
#[derive(Debug)]
pub struct Group {
    port: u16,
    /// The first failure of a trainer of the group.
    failed: Mutex<Option<String>>,
}

impl Group {
    /// A group that rendezvous on a port free on this machine now.
    pub fn new() -> std::io::Result<Group> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        Ok(Group {
            port,
            failed: Mutex::new(None),
        })
    }

    /// The variables `torch.distributed` reads, for `device` of `devices`.
    pub fn env(&self, device: usize, devices: usize) -> Vec<(&'static str, String)> {
        vec![
            (LOCKSTEP_ENV, "1".to_string()),
            ("RANK", device.to_string()),
            ("LOCAL_RANK", device.to_string()),
            ("WORLD_SIZE", devices.to_string()),
            ("LOCAL_WORLD_SIZE", devices.to_string()),
            ("MASTER_ADDR", MASTER_ADDR.to_string()),
            ("MASTER_PORT", self.port.to_string()),
        ]
    }

    /// A trainer of the group failed: the others stop too. The first
    /// failure is the one remembered.
    pub fn fail(&self, device: usize, reason: &dyn std::fmt::Display) {
        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        if failed.is_none() {
            *failed = Some(format!("device {device}: {reason}"));
        }
    }

    /// The first failure, once one happened.
    pub fn failure(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
