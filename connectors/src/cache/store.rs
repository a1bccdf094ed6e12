//! A store seen through the cache for one split's file: reads of the file
//! are served by [`Cache::read`]; everything else passes through.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    Result as StoreResult,
};

use super::{Cache, FileKey, Read};
use crate::split::Split;

/// The store of a location with reads of one file through the cache.
#[derive(Debug)]
pub(crate) struct Cached {
    inner: Arc<dyn ObjectStore>,
    cache: Arc<Cache>,
    key: FileKey,
    meta: ObjectMeta,
    /// The whole file, when the cache did not keep it and it is small.
    whole: tokio::sync::OnceCell<Bytes>,
}

impl Cached {
    /// `inner` (already pinned to `split`) with reads of `split`'s file
    /// through `cache` under `key`.
    pub(crate) fn new(
        inner: Arc<dyn ObjectStore>,
        cache: Arc<Cache>,
        key: FileKey,
        split: &Split,
    ) -> Cached {
        let last_modified = split
            .stamp
            .modified_ns
            .map(DateTime::<Utc>::from_timestamp_nanos)
            .unwrap_or_default();
        Cached {
            inner,
            cache,
            meta: ObjectMeta {
                location: split.object_path(),
                last_modified,
                size: split.size,
                e_tag: split.stamp.e_tag.clone(),
                version: None,
            },
            key,
            whole: tokio::sync::OnceCell::new(),
        }
    }

    /// Bytes `range` of the file: from the whole file when this holds it,
    /// else through the cache.
    async fn read(&self, range: Range<u64>) -> StoreResult<Bytes> {
        let slice = |whole: &Bytes| {
            let end = (range.end as usize).min(whole.len());
            whole.slice((range.start as usize).min(end)..end)
        };
        if let Some(whole) = self.whole.get() {
            return Ok(slice(whole));
        }
        let location = &self.meta.location;
        match self
            .cache
            .read(self.inner.as_ref(), location, &self.key, range.clone())
            .await?
        {
            Read::Range(bytes) => Ok(bytes),
            Read::Whole(whole) => {
                let bytes = slice(&whole);
                let _ = self.whole.set(whole);
                Ok(bytes)
            }
        }
    }

    /// The bytes of `range` in a get's result.
    fn result(&self, range: Range<u64>, bytes: Bytes) -> GetResult {
        GetResult {
            payload: GetResultPayload::Stream(Box::pin(futures::stream::once(
                async move { Ok(bytes) },
            ))),
            meta: self.meta.clone(),
            range,
            attributes: Attributes::default(),
        }
    }
}

impl fmt::Display for Cached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (cached in {})",
            self.inner,
            self.cache.dir().display()
        )
    }
}

#[async_trait]
#[allow(deprecated)]
impl ObjectStore for Cached {
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

    /// Reads of the file come from the cache; a head of it, when cached,
    /// answers what was planned without asking the store.
    async fn get_opts(&self, location: &Path, options: GetOptions) -> StoreResult<GetResult> {
        if *location != self.meta.location {
            return self.inner.get_opts(location, options).await;
        }
        if options.head {
            if self.cache.holds(&self.key) {
                return Ok(self.result(0..0, Bytes::new()));
            }
            return self.inner.get_opts(location, options).await;
        }
        let range = match &options.range {
            Some(range) => {
                range
                    .as_range(self.meta.size)
                    .map_err(|e| object_store::Error::Generic {
                        store: "cache",
                        source: Box::new(e),
                    })?
            }
            None => 0..self.meta.size,
        };
        let bytes = self.read(range.clone()).await?;
        Ok(self.result(range, bytes))
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> StoreResult<Vec<Bytes>> {
        if *location != self.meta.location {
            return self.inner.get_ranges(location, ranges).await;
        }
        let mut out = Vec::with_capacity(ranges.len());
        for range in ranges {
            let range = range.start.min(self.meta.size)..range.end.min(self.meta.size);
            out.push(self.read(range).await?);
        }
        Ok(out)
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
