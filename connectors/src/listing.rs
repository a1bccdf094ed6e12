//! Concurrent listing of an output directory, one request per directory,
//! applying the hidden / in-flight rules while walking. On a local filesystem
//! each directory is also read as a directory, for what object listings hide:
//! a broken symbolic link fails the listing (Spark fails on it when reading),
//! a FIFO, socket or device is reported as ignored, never read.

use futures::stream::{FuturesUnordered, StreamExt};
use object_store::path::{Path, PathPart};
use object_store::{ListResult, ObjectMeta, ObjectStoreExt};

use crate::error::{Error, ErrorKind, Result};
use crate::layout::names::{classify_dir, classify_file, DirClass, FileClass};
use crate::prune_dirs::DirPruner;
use crate::store::{Location, Oddity};
use crate::types::Ignored;

/// How many directories are listed at once.
const LIST_CONCURRENCY: usize = 32;

/// A file found under the root, with the directory segments leading to it.
#[derive(Debug, Clone)]
pub struct ListedFile {
    /// The object.
    pub meta: ObjectMeta,
    /// Directory names between the root and the file (still escaped).
    pub dirs: Vec<String>,
    /// What its name means.
    pub class: FileClass,
}

/// Everything found under a root, before any layout decision.
#[derive(Debug, Default)]
pub struct Listing {
    /// Files, markers and hidden files alike (hidden ones only counted).
    pub files: Vec<ListedFile>,
    /// In-flight names seen (`_temporary`, `__magic...`, `._COPYING_` files ...), relative to the root.
    pub in_flight: Vec<String>,
    /// Number of hidden names skipped.
    pub hidden: usize,
    /// Entries that are not files that can be read (FIFOs, sockets, devices), and why.
    pub ignored: Vec<Ignored>,
    /// Partition directories the filters reject, left unlisted: the
    /// directory names from the root to each (still escaped).
    pub pruned: Vec<Vec<String>>,
}

/// Lists everything under `location`, fanning out per directory.
///
/// Fails with [`Error::NotFound`] when nothing exists there and with a
/// layout error when the root is a single file.
pub async fn list(location: &Location) -> Result<Listing> {
    list_pruned(location, None).await
}

/// Lists everything under `location` as [`list`] does, except the partition
/// directories `pruner` rejects: those are never listed, only recorded in
/// [`Listing::pruned`].
pub async fn list_pruned(location: &Location, pruner: Option<&DirPruner>) -> Result<Listing> {
    // The root is checked while it is listed: one round trip to the store.
    let (checked, listing) =
        futures::join!(check_root(location), list_tree(location, pruner, None));
    checked?;
    listing
}

/// The root's own listing, taken once for every question about the root: is
/// it a table, a streaming sink, and what does it hold. On a remote store
/// each of those would otherwise be a round trip of its own, one after the
/// other. The root was checked (not a single file) while it was listed.
#[derive(Debug)]
pub struct RootListing {
    listed: ListResult,
    checked: Result<()>,
}

impl RootListing {
    /// Lists the root and checks it, side by side. `None` when the listing
    /// failed: the callers then ask the store again, each naming the
    /// failure its own way.
    pub async fn take(location: &Location) -> Option<RootListing> {
        let (checked, listed) = futures::join!(
            check_root(location),
            location.store.list_with_delimiter(Some(&location.root))
        );
        Some(RootListing {
            listed: listed.ok()?,
            checked,
        })
    }

    /// The subdirectories of the root.
    pub fn common_prefixes(&self) -> &[Path] {
        &self.listed.common_prefixes
    }

    /// Lists everything under the root as [`list_pruned`] does, starting
    /// from this listing of the root.
    pub async fn list_pruned(
        self,
        location: &Location,
        pruner: Option<&DirPruner>,
    ) -> Result<Listing> {
        self.checked?;
        list_tree(location, pruner, Some(self.listed)).await
    }
}

/// Lists the tree under the root (see [`list_pruned`]); `root`: the root's
/// listing when it was already taken.
async fn list_tree(
    location: &Location,
    pruner: Option<&DirPruner>,
    mut root: Option<ListResult>,
) -> Result<Listing> {
    let mut listing = Listing::default();
    let mut pending = FuturesUnordered::new();
    let mut queue: Vec<(Path, Vec<String>)> = vec![(location.root.clone(), Vec::new())];
    let mut seen_any = false;
    while !queue.is_empty() || !pending.is_empty() {
        while pending.len() < LIST_CONCURRENCY {
            let Some((dir, segments)) = queue.pop() else {
                break;
            };
            let store = location.store.clone();
            let listed = root.take();
            pending.push(async move {
                let result = match listed {
                    Some(listed) => Ok(listed),
                    None => store.list_with_delimiter(Some(&dir)).await,
                };
                let odd = location.oddities(&dir).await;
                (dir, segments, result, odd)
            });
        }
        let Some((dir, segments, result, odd)) = pending.next().await else {
            break;
        };
        let mut result = result.map_err(|e| list_error(location, &dir, e))?;
        seen_any |= !result.objects.is_empty() || !result.common_prefixes.is_empty();
        seen_any |= !odd.as_ref().map_or(true, Vec::is_empty);
        odd_entries(location, &dir, &segments, odd?, &mut result, &mut listing)?;
        queue_subdirs(
            result.common_prefixes,
            &segments,
            pruner,
            &mut queue,
            &mut listing,
        );
        add_objects(&dir, &segments, result.objects, &mut listing);
    }
    if !seen_any {
        return Err(nothing_under(location));
    }
    listing
        .files
        .sort_by(|a, b| a.meta.location.cmp(&b.meta.location));
    listing.in_flight.sort();
    listing.pruned.sort();
    Ok(listing)
}

/// Applies the rules for the subdirectories of one directory (at
/// `segments`): an in-flight one is recorded, a hidden one counted, a
/// partition `pruner` rejects recorded as pruned, the others queued.
fn queue_subdirs(
    prefixes: Vec<Path>,
    segments: &[String],
    pruner: Option<&DirPruner>,
    queue: &mut Vec<(Path, Vec<String>)>,
    listing: &mut Listing,
) {
    for prefix in prefixes {
        let name = prefix.filename().unwrap_or_default().to_string();
        let mut child = segments.to_vec();
        child.push(name.clone());
        match classify_dir(&name) {
            DirClass::InFlight => listing.in_flight.push(child.join("/")),
            DirClass::Hidden => listing.hidden += 1,
            DirClass::Partition { .. } if pruner.is_some_and(|p| !p.may_hold_kept(&child)) => {
                listing.pruned.push(child)
            }
            DirClass::Partition { .. } | DirClass::Plain => queue.push((prefix, child)),
        }
    }
}

/// Applies the rules for the objects of the directory `dir` (at
/// `segments`): directory markers are skipped, hidden files counted,
/// in-flight ones recorded, the others listed.
fn add_objects(dir: &Path, segments: &[String], objects: Vec<ObjectMeta>, listing: &mut Listing) {
    for meta in objects {
        if meta.location == *dir || meta.location.as_ref().ends_with('/') {
            continue; // a directory-marker key
        }
        let name = meta.location.filename().unwrap_or_default().to_string();
        let class = classify_file(&name);
        match class {
            FileClass::Hidden => listing.hidden += 1,
            FileClass::InFlight => {
                let mut rel = segments.to_vec();
                rel.push(name);
                listing.in_flight.push(rel.join("/"));
            }
            _ => listing.files.push(ListedFile {
                meta,
                dirs: segments.to_vec(),
                class,
            }),
        }
    }
}

/// The error for a root under which nothing was found: an empty directory
/// where it is a local one, else not found.
fn nothing_under(location: &Location) -> Error {
    let is_dir = location
        .local_path(&location.root)
        .is_some_and(|p| p.is_dir());
    match is_dir {
        true => Error::EmptyDir {
            path: location.url(),
        },
        false => Error::NotFound {
            path: location.url(),
        },
    }
}

/// Applies the rules for the odd entries of one local directory: a broken link
/// to anything not hidden fails the listing; an entry that is no regular file
/// leaves the objects and, unless hidden, is reported as ignored.
fn odd_entries(
    location: &Location,
    dir: &Path,
    segments: &[String],
    odd: Vec<Oddity>,
    result: &mut ListResult,
    listing: &mut Listing,
) -> Result<()> {
    for entry in odd {
        let path = dir.clone().join(entry.name());
        let part = PathPart::from(entry.name());
        result
            .objects
            .retain(|o| o.location.filename() != Some(part.as_ref()));
        match classify_file(entry.name()) {
            FileClass::Hidden => listing.hidden += 1,
            FileClass::InFlight => {
                let mut rel = segments.to_vec();
                rel.push(entry.name().to_string());
                listing.in_flight.push(rel.join("/"));
            }
            _ => match entry {
                Oddity::DanglingLink { target, .. } => {
                    return Err(Error::DanglingLink {
                        path: location.display(&path),
                        target: target.display().to_string(),
                    })
                }
                Oddity::NotRegular { kind, .. } => listing.ignored.push(Ignored {
                    path: location.display(&path),
                    reason: format!("not a regular file: {kind}"),
                }),
            },
        }
    }
    Ok(())
}

/// Fails when the root is a single file, or when an object store cannot be
/// reached at all (once, here, rather than again on the listing). Absence and
/// refusal are left to the listing, which names them better.
async fn check_root(location: &Location) -> Result<()> {
    if location.root.as_ref().is_empty() {
        // A bucket root is no file, and HEAD on it would ask about the bucket.
        return Ok(());
    }
    match location.store.head(&location.root).await {
        Ok(meta) => Err(Error::Layout {
            path: location.display(&meta.location),
            reason: "this is a file, not an output directory; pass the directory that holds it"
                .to_string(),
        }),
        Err(e) if location.bucket().is_some() => {
            let err = Error::from_store(location.url(), e);
            match err.kind() {
                ErrorKind::Store => Err(err),
                _ => Ok(()),
            }
        }
        Err(_) => Ok(()),
    }
}

/// The error for a failed listing of `dir`. In an object store, listing a
/// missing prefix finds nothing, so "not found" means the bucket is missing.
fn list_error(location: &Location, dir: &Path, source: object_store::Error) -> Error {
    let err = Error::from_store(location.display(dir), source);
    match location.bucket() {
        Some(bucket) if err.kind() == ErrorKind::NotFound => {
            Error::no_such_bucket(bucket, location.url())
        }
        _ => err,
    }
}
