//! The partitions of a job's source: a URL whose path segments may hold `*`
//! (`hdfs://nn/warehouse/clicks/dt=*`), expanded by listing the store one level per
//! segment, and each partition found told complete or waiting.
//!
//! A partition is complete when it holds `_SUCCESS`, or when a directory above it (up
//! to the part of the source before the first `*`) holds `_SUCCESS` and no in-flight
//! output (`_temporary`, `.spark-staging-*`): a whole-table write committed, and no
//! later one is merging into it.

use std::collections::HashSet;

use connectors::layout::names::{classify_dir, DirClass};
use connectors::Location;
use futures::stream::{self, StreamExt, TryStreamExt};
use globset::{Glob, GlobBuilder};
use object_store::path::Path;

use super::RunError;

/// Directories listed at once.
const LIST_CONCURRENCY: usize = 16;

/// A source split at its first `*`: the directory above it and the segments to match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    /// The URL of the fixed part (the directory the partitions live under).
    pub base: String,
    /// Path segments below `base`, each possibly holding `*`.
    pub segments: Vec<String>,
    /// Each segment as a glob, in the same order.
    globs: Vec<Glob>,
}

impl Pattern {
    /// Splits `source`; without `*` the source is one partition, its own base.
    pub fn parse(source: &str) -> Result<Pattern, RunError> {
        let invalid = |reason: &str| RunError::Source {
            source_url: source.to_string(),
            reason: reason.to_string(),
        };
        let trimmed = source.trim_end_matches('/');
        let Some(star) = trimmed.find('*') else {
            return Ok(Pattern {
                base: trimmed.to_string(),
                segments: Vec::new(),
                globs: Vec::new(),
            });
        };
        let authority_end = trimmed.find("://").map(|i| i + 3).unwrap_or(0);
        let cut = trimmed[..star].rfind('/');
        let (base, rest) = match cut {
            Some(cut) if cut >= authority_end => (&trimmed[..cut], &trimmed[cut + 1..]),
            Some(_) => return Err(invalid("`*` may only stand in the path")),
            None => (".", trimmed),
        };
        let base = if base.is_empty() { "/" } else { base };
        if base.ends_with("://") {
            return Err(invalid(
                "`*` may only stand in the path, below the store's root",
            ));
        }
        let segments: Vec<String> = rest.split('/').map(str::to_string).collect();
        if segments
            .iter()
            .any(|s| s.is_empty() || s == "." || s == "..")
        {
            return Err(invalid(
                "empty, `.` or `..` path segment after the first `*`",
            ));
        }
        let globs = segments
            .iter()
            .map(|segment| {
                segment_glob(segment)
                    .map_err(|e| invalid(&format!("`{segment}` is not a pattern: {e}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(Pattern {
            base: base.to_string(),
            segments,
            globs,
        })
    }
}

/// Whether a partition can be trained now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Committed: its own `_SUCCESS`, or one of the whole table above it.
    Complete,
    /// Not yet: why (no `_SUCCESS`, output in flight).
    Waiting(String),
}

/// One directory the pattern matched.
#[derive(Debug, Clone)]
pub struct Partition {
    /// Its path in the store.
    pub path: Path,
    /// Its path below the base (`dt=2026-11-29`), the key it is recorded under;
    /// empty when the source has no `*`.
    pub name: String,
    /// Complete or waiting.
    pub status: Status,
}

/// The source's partitions, in name order.
#[derive(Debug, Clone)]
pub struct Expansion {
    /// The directory above the partitions.
    pub base: Location,
    /// Every directory the pattern matched (a source without `*` matches its own
    /// directory unless that is missing or empty).
    pub partitions: Vec<Partition>,
}

/// What one directory holds, as far as completeness goes.
struct DirFacts {
    /// Nothing at all is listed there (no such directory, or an empty one).
    empty: bool,
    children: Vec<Path>,
    success: bool,
    in_flight: Vec<String>,
}

/// Lists the store to expand `pattern`.
pub async fn expand(pattern: &Pattern) -> Result<Expansion, RunError> {
    let base = connectors::store::open(&pattern.base).map_err(RunError::read("open the source"))?;
    let mut level = vec![base.root.clone()];
    // Directories whose `_SUCCESS` commits everything below them.
    let mut committed: HashSet<Path> = HashSet::new();
    for glob in &pattern.globs {
        let matcher = glob.compile_matcher();
        let listed = list_all(&base, &level).await?;
        let mut next = Vec::new();
        for (dir, facts) in level.iter().zip(listed) {
            if facts.success && facts.in_flight.is_empty() {
                committed.insert(dir.clone());
            }
            next.extend(
                facts
                    .children
                    .into_iter()
                    .filter(|child| matcher.is_match(child.filename().unwrap_or_default())),
            );
        }
        next.sort();
        level = next;
    }
    let listed = list_all(&base, &level).await?;
    let partitions = level
        .into_iter()
        .zip(listed)
        // A source without `*` that lists nothing matches nothing: it is missing or empty.
        .filter(|(_, facts)| !(pattern.segments.is_empty() && facts.empty))
        .map(|(path, facts)| {
            let name = relative(&base.root, &path);
            let by_table = committed.iter().any(|dir| path.prefix_matches(dir));
            let status = if facts.success || by_table {
                Status::Complete
            } else if facts.in_flight.is_empty() {
                Status::Waiting("no _SUCCESS".to_string())
            } else {
                Status::Waiting(format!(
                    "no _SUCCESS; in flight: {}",
                    facts.in_flight.join(", ")
                ))
            };
            Partition { path, name, status }
        })
        .collect();
    Ok(Expansion { base, partitions })
}

/// Lists each directory once (concurrently), keeping the order.
async fn list_all(base: &Location, dirs: &[Path]) -> Result<Vec<DirFacts>, RunError> {
    stream::iter(dirs.iter().map(|dir| list_dir(base, dir)))
        .buffered(LIST_CONCURRENCY)
        .try_collect()
        .await
}

async fn list_dir(base: &Location, dir: &Path) -> Result<DirFacts, RunError> {
    let listed = base
        .store
        .list_with_delimiter(Some(dir))
        .await
        .map_err(|e| connectors::Error::from_store(base.display(dir), e))
        .map_err(RunError::read("list the source's partitions"))?;
    let mut facts = DirFacts {
        empty: listed.objects.is_empty() && listed.common_prefixes.is_empty(),
        children: Vec::new(),
        success: listed
            .objects
            .iter()
            .any(|o| o.location.filename() == Some("_SUCCESS")),
        in_flight: Vec::new(),
    };
    for prefix in listed.common_prefixes {
        let name = prefix.filename().unwrap_or_default().to_string();
        match classify_dir(&name) {
            DirClass::InFlight => facts.in_flight.push(name),
            DirClass::Hidden => {}
            DirClass::Partition { .. } | DirClass::Plain => facts.children.push(prefix),
        }
    }
    Ok(facts)
}

/// `path` below `root`, `/`-joined.
fn relative(root: &Path, path: &Path) -> String {
    path.prefix_match(root)
        .map(|parts| {
            parts
                .map(|p| p.as_ref().to_string())
                .collect::<Vec<_>>()
                .join("/")
        })
        .unwrap_or_else(|| path.to_string())
}

/// One path segment of a source as a glob: `*` stands for any run of characters
/// (none included) short of `/`; every other character stands for itself (`?`, `[`,
/// `{` and `\\` too: a source's only wildcard is `*`).
fn segment_glob(segment: &str) -> Result<Glob, globset::Error> {
    let mut glob = String::with_capacity(segment.len());
    for (i, literal) in segment.split('*').enumerate() {
        // Runs of `*` are one `*` (globset gives `**` a meaning of its own).
        if i > 0 && !glob.ends_with('*') {
            glob.push('*');
        }
        glob.push_str(&globset::escape(literal));
    }
    GlobBuilder::new(&glob)
        .literal_separator(true)
        .backslash_escape(false)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, name: &str) -> bool {
        segment_glob(pattern)
            .expect("a segment is always a valid glob")
            .compile_matcher()
            .is_match(name)
    }

    #[test]
    fn wildcards_match_runs_of_characters() {
        assert!(matches("dt=*", "dt=2026-11-29"));
        assert!(matches("dt=2026-*-29", "dt=2026-11-29"));
        assert!(matches("*", "anything"));
        assert!(!matches("dt=*", "hour=1"));
        assert!(!matches("a*b*c", "abca"));
        assert!(matches("a*b*c", "aXbYc"));
        assert!(matches("plain", "plain"));
        assert!(!matches("ab*ba", "aba"));
        assert!(matches("dt=*", "dt="));
        assert!(matches("a**b", "aXYb"));
        assert!(matches("**", "x"));
    }

    #[test]
    fn only_star_is_a_wildcard() {
        assert!(matches("q=?*", "q=?1"));
        assert!(!matches("q=?*", "q=a1"));
        assert!(matches("k=[ab]*", "k=[ab]1"));
        assert!(!matches("k=[ab]*", "k=a1"));
        assert!(matches("k={a,b}*", "k={a,b}"));
        assert!(!matches("k={a,b}*", "k=a"));
        assert!(matches("back\\*", "back\\slash"));
        assert!(!matches("dt=*", "dt=1/x"));
    }

    #[test]
    fn patterns_split_at_the_first_star() {
        let p = Pattern::parse("hdfs://nn:8020/warehouse/clicks/dt=*/hour=*").expect("valid");
        assert_eq!(p.base, "hdfs://nn:8020/warehouse/clicks");
        assert_eq!(p.segments, vec!["dt=*", "hour=*"]);
        let p = Pattern::parse("/data/out/").expect("valid");
        assert_eq!(p.base, "/data/out");
        assert!(p.segments.is_empty());
        let p = Pattern::parse("/dt=*").expect("valid");
        assert_eq!(p.base, "/");
        assert!(Pattern::parse("s3://bucket-*/x").is_err());
        assert!(Pattern::parse("s3://*").is_err());
        assert!(Pattern::parse("/a/dt=*//x").is_err());
    }
}
