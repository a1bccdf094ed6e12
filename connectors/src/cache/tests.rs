//! The cache against an in-memory store: what is fetched, what is served.

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::*;
use crate::split::{FileStamp, SplitRange};
use crate::{Format, Split};

fn split(path: &str, size: u64, tag: &str) -> Split {
    Split {
        path: path.into(),
        size,
        format: Format::Parquet,
        codec: crate::codec::Codec::None,
        partition_dir: String::new(),
        partition_values: Vec::new(),
        range: SplitRange::Whole,
        rows: None,
        deleted: Vec::new(),
        stamp: FileStamp {
            e_tag: Some(tag.into()),
            modified_ns: Some(5),
        },
        source: 0,
        window: None,
    }
}

/// Bytes `range` through `cache`, as a reader of one split gets them.
async fn read(
    cache: &Arc<Cache>,
    store: &dyn ObjectStore,
    path: &Path,
    key: &FileKey,
    range: std::ops::Range<u64>,
) -> object_store::Result<bytes::Bytes> {
    Ok(match cache.read(store, path, key, range.clone()).await? {
        Read::Range(bytes) => bytes,
        Read::Whole(whole) => whole.slice(range.start as usize..range.end as usize),
    })
}

async fn store_with(path: &str, data: &[u8]) -> Arc<dyn ObjectStore> {
    let store = InMemory::new();
    store
        .put(&Path::from(path), PutPayload::from(data.to_vec()))
        .await
        .unwrap();
    Arc::new(store)
}

#[tokio::test]
async fn a_file_is_fetched_once_and_served_from_disk_after() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let store = store_with("d/a", &data).await;
    let key = FileKey::of("mem://", &split("d/a", data.len() as u64, "t1")).unwrap();
    let cache = Cache::open(dir.path(), 1 << 30).unwrap();
    let path = Path::from("d/a");
    let got = read(&cache, store.as_ref(), &path, &key, 10..20)
        .await
        .unwrap();
    assert_eq!(&got[..], &data[10..20]);
    let got = read(&cache, store.as_ref(), &path, &key, 0..300_000)
        .await
        .unwrap();
    assert_eq!(&got[..], &data[..]);
    let stats = cache.stats();
    assert_eq!(stats.fetched_bytes, data.len() as u64);
    assert_eq!(stats.hit_bytes, data.len() as u64);
    assert_eq!(stats.bytes, data.len() as u64);
    assert!(cache.holds(&key));

    // Another process opening the directory finds it.
    let again = Cache::open(dir.path(), 1 << 30).unwrap();
    assert!(again.holds(&key));
    let got = read(&again, store.as_ref(), &path, &key, 5..9)
        .await
        .unwrap();
    assert_eq!(&got[..], &data[5..9]);
    assert_eq!(again.stats().fetched_bytes, 0);

    // A rewritten file is another key: fetched, not served from the old entry.
    let new_data = vec![1u8; data.len()];
    let store = store_with("d/a", &new_data).await;
    let key2 = FileKey::of("mem://", &split("d/a", data.len() as u64, "t2")).unwrap();
    assert!(!again.holds(&key2));
    let got = read(&again, store.as_ref(), &path, &key2, 0..4)
        .await
        .unwrap();
    assert_eq!(&got[..], &[1, 1, 1, 1]);
    assert_eq!(again.stats().fetched_bytes, data.len() as u64);
}

#[tokio::test]
async fn a_damaged_entry_is_removed_and_fetched_again() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..5000u32).map(|i| (i % 7) as u8).collect();
    let store = store_with("f", &data).await;
    let key = FileKey::of("mem://", &split("f", data.len() as u64, "t")).unwrap();
    let path = Path::from("f");
    let cache = Cache::open(dir.path(), 1 << 30).unwrap();
    read(&cache, store.as_ref(), &path, &key, 0..1)
        .await
        .unwrap();
    let entry = cache.entry_path(&key.name, key.size);
    let mut bytes = std::fs::read(&entry).unwrap();
    bytes[100] ^= 0x55;
    std::fs::write(&entry, &bytes).unwrap();

    let fresh = Cache::open(dir.path(), 1 << 30).unwrap();
    let got = read(&fresh, store.as_ref(), &path, &key, 0..5000)
        .await
        .unwrap();
    assert_eq!(&got[..], &data[..]);
    assert_eq!(fresh.stats().fetched_bytes, data.len() as u64);
    assert_eq!(fresh.stats().hit_bytes, 0);
    let whole = std::fs::read(&entry).unwrap();
    assert_eq!(whole[100], data[100], "written again, whole");
}

#[tokio::test]
async fn a_full_cache_keeps_what_it_holds_and_reads_the_rest_through() {
    let dir = tempfile::tempdir().unwrap();
    let data = vec![3u8; 1000];
    let cache = Cache::open(dir.path(), 1500).unwrap();
    let keys: Vec<FileKey> = ["a", "b"]
        .iter()
        .map(|name| FileKey::of("mem://", &split(name, 1000, "t")).unwrap())
        .collect();
    cache.set_job(keys.iter());
    for (name, key) in ["a", "b"].iter().zip(&keys) {
        let store = store_with(name, &data).await;
        let got = read(&cache, store.as_ref(), &Path::from(*name), key, 0..1000)
            .await
            .unwrap();
        assert_eq!(&got[..], &data[..]);
    }
    assert!(cache.holds(&keys[0]));
    assert!(!cache.holds(&keys[1]), "no room: not admitted");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        2,
        "one entry and the lock"
    );
}

#[test]
fn files_without_a_stamp_are_not_cached() {
    let mut s = split("x", 10, "t");
    s.stamp = FileStamp::default();
    assert!(FileKey::of("s3://b", &s).is_none());
    let a = FileKey::of("s3://b", &split("x", 10, "t")).unwrap();
    let b = FileKey::of("s3://b", &split("x", 10, "u")).unwrap();
    assert_ne!(a.name, b.name);
}

#[tokio::test]
async fn a_small_file_not_kept_is_fetched_whole_once_per_read() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..4000u32).map(|i| (i % 13) as u8).collect();
    let store = store_with("s", &data).await;
    let mut split = split("s", data.len() as u64, "t");
    split.stamp = FileStamp::of(&store.head(&Path::from("s")).await.unwrap());
    let cache = Cache::open(dir.path(), 10).unwrap();
    let mut location = crate::Location::new(store, Path::default(), "mem://b");
    location = location.with_cache(cache.clone());
    let pinned = location.pinned(&split);
    let path = Path::from("s");
    for range in [3990..4000, 0..100, 100..200] {
        let got = pinned.store.get_range(&path, range.clone()).await.unwrap();
        assert_eq!(&got[..], &data[range.start as usize..range.end as usize]);
    }
    assert_eq!(cache.stats().fetched_bytes, data.len() as u64, "one fetch");
    assert!(!cache.holds(&FileKey::of("mem://b", &split).unwrap()));
}

#[test]
fn a_temporary_entry_of_a_process_gone_is_removed_and_never_served() {
    let dir = tempfile::tempdir().unwrap();
    // What a writer killed mid-write leaves: its temporary file. No live
    // process has this id (above the kernel's pid_max).
    let temp = dir.path().join("00ab.4194305.5000.tmp");
    std::fs::write(&temp, vec![1u8; 100]).unwrap();
    let key = FileKey::of("mem://", &split("x", 5000, "t")).unwrap();
    let cache = Cache::open(dir.path(), 10_000).unwrap();
    assert!(!temp.exists(), "removed when the directory was opened");
    assert!(!cache.holds(&key));
    assert_eq!(cache.stats().bytes, 0);
}

#[tokio::test]
async fn processes_sharing_a_directory_share_its_room() {
    let dir = tempfile::tempdir().unwrap();
    let data = vec![5u8; 1000];
    let keys: Vec<FileKey> = ["p", "q"]
        .iter()
        .map(|name| FileKey::of("mem://", &split(name, 1000, "t")).unwrap())
        .collect();
    // Two openings of one directory, as two workers on one host have.
    let first = Cache::open(dir.path(), 1500).unwrap();
    let second = Cache::open(dir.path(), 1500).unwrap();
    first.set_job(keys.iter());
    second.set_job(keys.iter());
    let store = store_with("p", &data).await;
    read(&first, store.as_ref(), &Path::from("p"), &keys[0], 0..10)
        .await
        .unwrap();
    let store = store_with("q", &data).await;
    read(&second, store.as_ref(), &Path::from("q"), &keys[1], 0..10)
        .await
        .unwrap();
    assert!(
        !second.holds(&keys[1]),
        "the first one's entry fills the room"
    );
    // The second finds the first's entry on disk, whole.
    let store = store_with("p", &[9u8; 1000]).await;
    let got = read(&second, store.as_ref(), &Path::from("p"), &keys[0], 0..3)
        .await
        .unwrap();
    assert_eq!(&got[..], &[5, 5, 5], "served from the shared entry");
    assert_eq!(second.stats().hit_bytes, 3);
}

/// The permission bits of `path`, in octal.
fn mode_of(path: &std::path::Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    format!(
        "{:o}",
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    )
}

#[tokio::test]
async fn a_cache_is_private_to_its_user_from_the_start() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("cache");
    let data = vec![7u8; 1000];
    let store = store_with("d/a", &data).await;
    let key = FileKey::of("mem://", &split("d/a", data.len() as u64, "t1")).unwrap();
    let cache = Cache::open(&dir, 1 << 30).unwrap();
    read(&cache, store.as_ref(), &Path::from("d/a"), &key, 0..10)
        .await
        .unwrap();
    assert_eq!(mode_of(&dir), "700", "the directory");
    let mut files = 0;
    for item in std::fs::read_dir(&dir).unwrap() {
        let path = item.unwrap().path();
        assert_eq!(mode_of(&path), "600", "{}", path.display());
        files += 1;
    }
    assert_eq!(files, 2, "the entry and .lock");
}

#[tokio::test]
async fn a_cache_an_older_build_left_readable_is_made_private_when_opened() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("cache");
    let data = vec![7u8; 1000];
    let store = store_with("d/a", &data).await;
    let key = FileKey::of("mem://", &split("d/a", data.len() as u64, "t1")).unwrap();
    let cache = Cache::open(&dir, 1 << 30).unwrap();
    read(&cache, store.as_ref(), &Path::from("d/a"), &key, 0..10)
        .await
        .unwrap();
    drop(cache);
    let loose = |path: &std::path::Path, mode| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    loose(&dir, 0o755);
    for item in std::fs::read_dir(&dir).unwrap() {
        loose(&item.unwrap().path(), 0o644);
    }
    let again = Cache::open(&dir, 1 << 30).unwrap();
    assert!(again.holds(&key));
    assert_eq!(mode_of(&dir), "700", "the directory");
    for item in std::fs::read_dir(&dir).unwrap() {
        let path = item.unwrap().path();
        assert_eq!(mode_of(&path), "600", "{}", path.display());
    }
}
