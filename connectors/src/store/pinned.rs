//! A store seen through one split: every read of the split's file asks for
//! the file as it was planned, where the store can be asked (`If-Match` with
//! the listed entity tag on S3, GCS, Azure and HDFS; `If-Unmodified-Since` on
//! the local filesystem), and checks what the store answers against what was
//! planned (size, entity tag, modification time). A file changed since
//! planning fails the read with a precondition error, which the connectors
//! report as [`crate::Error::Changed`]: never read, never waited for.
//!
//! The local store's entity tag holds the file's inode, which a copy of the
//! same file on another machine does not share; local files are compared by
//! size and modification time instead.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result as StoreResult,
};

use crate::split::{FileStamp, Split};

/// How a store's entity tags are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tags {
    /// Object stores and HDFS: sent in `If-Match` as listed, compared without
    /// quotes (Azure lists them bare and answers them quoted).
    Tagged,
    /// The local filesystem: tags not used, size and modification time are.
    Local,
}

/// The store of a location, pinned to one split's file as planned.
#[derive(Debug)]
pub(crate) struct Pinned {
    inner: Arc<dyn ObjectStore>,
    path: Path,
    size: u64,
    stamp: FileStamp,
    tags: Tags,
}

impl Pinned {
    /// `inner` with reads of `split`'s file checked against its plan.
    pub(crate) fn new(inner: Arc<dyn ObjectStore>, split: &Split, tags: Tags) -> Pinned {
        Pinned {
            inner,
            path: split.object_path(),
            size: split.size,
            stamp: split.stamp.clone(),
            tags,
        }
    }

    /// `options` with the conditions that ask for the planned file.
    fn conditions(&self, mut options: GetOptions) -> GetOptions {
        match (self.tags, &self.stamp.e_tag, self.stamp.modified_ns) {
            (Tags::Tagged, Some(tag), _) if options.if_match.is_none() => {
                options.if_match = Some(tag.clone());
            }
            (Tags::Local, _, Some(ns)) if options.if_unmodified_since.is_none() => {
                options.if_unmodified_since = Some(DateTime::<Utc>::from_timestamp_nanos(ns));
            }
            _ => {}
        }
        options
    }

    /// How the file the store describes differs from the planned one, if it does.
    fn differs(&self, meta: &ObjectMeta) -> Option<String> {
        let modified = (meta.last_modified.timestamp() != 0)
            .then(|| meta.last_modified.timestamp_nanos_opt())
            .flatten();
        differs(
            self.size,
            &self.stamp,
            self.tags,
            meta.size,
            meta.e_tag.as_deref(),
            modified,
        )
    }

    /// The error for a file found changed.
    fn changed(&self, reason: String) -> object_store::Error {
        object_store::Error::Precondition {
            path: self.path.to_string(),
            source: reason.into(),
        }
    }
}

/// How a file of `size` bytes, entity tag `tag` and modification time
/// `modified` differs from the planned `planned_size` and `stamp`, if it does.
/// Sizes are always compared; entity tags where both are known (and the store
/// uses them); modification times where no tag was compared.
fn differs(
    planned_size: u64,
    stamp: &FileStamp,
    tags: Tags,
    size: u64,
    tag: Option<&str>,
    modified: Option<i64>,
) -> Option<String> {
    if size != planned_size {
        return Some(format!("{planned_size} bytes when planned, {size} now"));
    }
    if tags != Tags::Local {
        if let (Some(was), Some(now)) = (&stamp.e_tag, tag) {
            return (bare(was) != bare(now))
                .then(|| format!("entity tag {} when planned, {} now", bare(was), bare(now)));
        }
    }
    match (stamp.modified_ns, modified) {
        (Some(was), Some(now)) if was != now => Some(format!(
            "modified at {} when planned, at {} now",
            DateTime::<Utc>::from_timestamp_nanos(was).to_rfc3339(),
            DateTime::<Utc>::from_timestamp_nanos(now).to_rfc3339()
        )),
        _ => None,
    }
}

/// An entity tag without its weak mark and quotes. `W/` marks a weak tag only
/// before a quoted one (RFC 9110, 8.8.3): a bare tag (a listing's JSON field)
/// is the opaque value itself, and may begin with `W/` (GCS's base64 MD5s do).
fn bare(tag: &str) -> &str {
    let tag = match tag.strip_prefix("W/") {
        Some(quoted) if quoted.starts_with('"') => quoted,
        _ => tag,
    };
    tag.trim_matches('"')
}

/// How a local file opened by path (`metadata` of the open file) differs
/// from the planned split, if it does: for readers that read a local file
/// themselves rather than through the store.
pub(crate) fn local_file_differs(split: &Split, metadata: &std::fs::Metadata) -> Option<String> {
    let modified = metadata
        .modified()
        .ok()
        .map(DateTime::<Utc>::from)
        .and_then(|t| t.timestamp_nanos_opt());
    differs(
        split.size,
        &split.stamp,
        Tags::Local,
        metadata.len(),
        None,
        modified,
    )
}

impl fmt::Display for Pinned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (pinned to {})", self.inner, self.path)
    }
}

#[async_trait]
#[allow(deprecated)]
impl ObjectStore for Pinned {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> StoreResult<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> StoreResult<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    /// Reads of the pinned file ask for it as planned and are checked
    /// against the plan; others pass through.
    async fn get_opts(&self, location: &Path, options: GetOptions) -> StoreResult<GetResult> {
        if *location != self.path {
            return self.inner.get_opts(location, options).await;
        }
        let result = match self
            .inner
            .get_opts(location, self.conditions(options.clone()))
            .await
        {
            Ok(result) => result,
            Err(object_store::Error::Precondition { .. }) => {
                // Refused: the file changed, or the store wants the tag
                // written otherwise (quoted or not). Its description says
                // which; a file found as planned is read without the condition.
                let head = GetOptions::new().with_head(true);
                let meta = self.inner.get_opts(location, head).await?.meta;
                if let Some(reason) = self.differs(&meta) {
                    return Err(self.changed(reason));
                }
                self.inner.get_opts(location, options).await?
            }
            Err(e) => return Err(e),
        };
        match self.differs(&result.meta) {
            Some(reason) => Err(self.changed(reason)),
            None => Ok(result),
        }
    }

    /// Ranges of the pinned file are read once the file is found as planned.
    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> StoreResult<Vec<Bytes>> {
        if *location == self.path {
            self.get_opts(location, GetOptions::new().with_head(true))
                .await?;
        }
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, StoreResult<Path>>,
    ) -> BoxStream<'static, StoreResult<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, StoreResult<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> StoreResult<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> StoreResult<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> StoreResult<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(tag: Option<&str>, modified: Option<i64>) -> FileStamp {
        FileStamp {
            e_tag: tag.map(str::to_string),
            modified_ns: modified,
        }
    }

    #[test]
    fn sizes_are_always_compared() {
        let planned = stamp(Some("\"a\""), Some(5));
        for tags in [Tags::Tagged, Tags::Local] {
            let found = differs(10, &planned, tags, 9, Some("\"a\""), Some(5));
            assert_eq!(found.as_deref(), Some("10 bytes when planned, 9 now"));
            assert_eq!(
                differs(10, &FileStamp::default(), tags, 11, None, None).as_deref(),
                Some("10 bytes when planned, 11 now")
            );
        }
    }

    #[test]
    fn tags_are_compared_without_quotes_where_the_store_uses_them() {
        let planned = stamp(Some("0x8D1"), Some(5));
        assert_eq!(
            differs(10, &planned, Tags::Tagged, 10, Some("\"0x8D1\""), Some(7)),
            None,
            "Azure lists a bare tag and answers it quoted; the time of a GET is coarser"
        );
        assert!(differs(10, &planned, Tags::Tagged, 10, Some("\"0x8D2\""), Some(5)).is_some());
        assert!(differs(10, &planned, Tags::Tagged, 10, Some("0x8D2"), Some(5)).is_some());
    }

    #[test]
    fn a_tag_that_begins_with_w_slash_is_weak_only_before_quotes() {
        // GCS lists an object's base64 MD5 bare and answers a GET with it quoted.
        let planned = stamp(Some("W/5OaHp5BOq56EZVTAMLpQ=="), None);
        let now = Some("\"W/5OaHp5BOq56EZVTAMLpQ==\"");
        assert_eq!(differs(10, &planned, Tags::Tagged, 10, now, None), None);
        // A weak tag is the same tag as its strong form.
        let planned = stamp(Some("\"abc\""), None);
        assert_eq!(
            differs(10, &planned, Tags::Tagged, 10, Some("W/\"abc\""), None),
            None
        );
        let found = differs(10, &planned, Tags::Tagged, 10, Some("W/abc"), None);
        assert_eq!(
            found.as_deref(),
            Some("entity tag abc when planned, W/abc now")
        );
    }

    #[test]
    fn local_files_go_by_their_modification_time_not_their_inode() {
        let planned = stamp(Some("1a-5-a"), Some(5));
        assert_eq!(
            differs(10, &planned, Tags::Local, 10, Some("2b-5-a"), Some(5)),
            None
        );
        let found = differs(10, &planned, Tags::Local, 10, Some("1a-6-a"), Some(6));
        assert!(found.is_some_and(|r| r.starts_with("modified at")));
    }

    #[test]
    fn a_split_planned_without_a_stamp_checks_its_size_only() {
        for tags in [Tags::Tagged, Tags::Local] {
            let planned = FileStamp::default();
            assert_eq!(differs(10, &planned, tags, 10, Some("x"), Some(9)), None);
        }
    }
}
