//! A mixed job's sources in the shell: each batch tagged with its epoch, step
//! and (where all its rows came from one) source, and the rows acknowledged
//! counted by source.

use std::sync::Arc;

use super::Shell;
use crate::trainer::protocol::{
    EPOCH_KEY, EPOCH_STEPS_KEY, EPOCH_STEPS_UNKNOWN_KEY, SOURCE_KEY, STEP_KEY,
};
use crate::worker::batcher::OutBatch;
use crate::worker::Piece;

/// The sources of a job that mixes several: which one a batch holds, and
/// how many rows of each the trainers acknowledged.
impl Shell {
    /// The source of every row of `provenance`, when the job mixes several
    /// sources and they all came from one.
    pub(super) fn source_of(&self, provenance: &[Piece]) -> Option<u32> {
        if self.plan.source_names.is_empty() {
            return None;
        }
        let mut sources = provenance.iter().map(|p| {
            let (_, split) = self.coordinator.origin(p.attempt)?;
            self.splits.get(split as usize).map(|s| s.source)
        });
        let first = sources.next()??;
        sources.all(|s| s == Some(first)).then_some(first)
    }

    /// `out` with its epoch, step and the steps of its epoch in its metadata
    /// (under lockstep the stepper gave the first two), and its source's name
    /// (`sluice.source`) when all its rows came from one source of a mixed job.
    pub(super) fn tagged(&mut self, mut out: OutBatch) -> OutBatch {
        let schema = out.data.schema();
        let mut metadata = schema.metadata().clone();
        if !metadata.contains_key(EPOCH_KEY) {
            let next = self.next_step.entry(out.epoch).or_insert(0);
            metadata.insert(EPOCH_KEY.to_string(), out.epoch.0.to_string());
            metadata.insert(STEP_KEY.to_string(), next.to_string());
            *next += 1;
        }
        match &self.epoch_steps {
            Ok(steps) => metadata.insert(EPOCH_STEPS_KEY.to_string(), steps.to_string()),
            Err(why) => metadata.insert(EPOCH_STEPS_UNKNOWN_KEY.to_string(), why.clone()),
        };
        if let Some(name) = self
            .source_of(&out.provenance)
            .and_then(|s| self.plan.source_names.get(s as usize))
        {
            metadata.insert(SOURCE_KEY.to_string(), name.clone());
        }
        let tagged = Arc::new(schema.as_ref().clone().with_metadata(metadata));
        if let Ok(data) = out.data.clone().with_schema(tagged) {
            out.data = data;
        }
        out
    }

    /// Counts the rows of `provenance`, acknowledged, by their source.
    pub(super) fn count_sources(&mut self, provenance: &[Piece]) {
        if self.plan.source_names.is_empty() {
            return;
        }
        let sources = self.plan.source_names.len();
        self.source_rows.resize(sources, 0);
        for piece in provenance {
            let Some((_, split)) = self.coordinator.origin(piece.attempt) else {
                continue;
            };
            let source = self.splits.get(split as usize).map_or(0, |s| s.source);
            if let Some(n) = self.source_rows.get_mut(source as usize) {
                *n += piece.len;
            }
        }
    }
}
