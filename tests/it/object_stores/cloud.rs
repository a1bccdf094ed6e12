//! The three object stores as the tests see them: their emulator, how to make a
//! bucket there, an object_store client for uploads, and the URL and environment
//! that point sluice at them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures::stream::{self, StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::path::Path as KeyPath;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload};

use super::http;
use super::service::Service;

/// Azurite's well-known account and key (public, documented by Microsoft).
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Which object store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    S3,
    Gcs,
    Azure,
}

impl Kind {
    /// The URL scheme sluice reads it with.
    pub fn scheme(self) -> &'static str {
        match self {
            Kind::S3 => "s3",
            Kind::Gcs => "gs",
            Kind::Azure => "az",
        }
    }

    /// The environment that points sluice at an emulator answering on `endpoint`
    /// (`http://127.0.0.1:PORT`), as a user would set it.
    pub fn env(self, endpoint: &str) -> Vec<(&'static str, String)> {
        match self {
            Kind::S3 => vec![
                ("AWS_ENDPOINT_URL", endpoint.to_string()),
                ("AWS_ACCESS_KEY_ID", "sluice-test".to_string()),
                ("AWS_SECRET_ACCESS_KEY", "sluice-test-secret".to_string()),
                ("AWS_REGION", "us-east-1".to_string()),
            ],
            Kind::Gcs => vec![(
                "STORAGE_EMULATOR_HOST",
                endpoint.trim_start_matches("http://").to_string(),
            )],
            Kind::Azure => vec![
                ("AZURE_STORAGE_USE_EMULATOR", "true".to_string()),
                ("AZURITE_BLOB_STORAGE_URL", endpoint.to_string()),
            ],
        }
    }
}

/// A running emulator of one kind.
pub struct Cloud {
    pub kind: Kind,
    pub service: Service,
}

impl Cloud {
    /// Starts (or joins) the emulator of `kind`.
    pub fn start(kind: Kind) -> Cloud {
        let service = match kind {
            Kind::S3 => Service::start("s3", "s3", &[]),
            Kind::Gcs => Service::start("gcs", "gcs", &[]),
            Kind::Azure => Service::start("azure", "azure", &[]),
        };
        Cloud { kind, service }
    }

    /// The environment for sluice (see [`Kind::env`]).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        self.kind.env(&self.service.endpoint)
    }

    /// `scheme://bucket/prefix`.
    pub fn url(&self, bucket: &str, prefix: &str) -> String {
        format!("{}://{bucket}/{prefix}", self.kind.scheme())
    }

    /// Creates a bucket (container) with a name no other test or run uses.
    pub fn new_bucket(&self, what: &str) -> String {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let bucket = format!(
            "{what}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let ep = &self.service.endpoint;
        let answer = match self.kind {
            Kind::S3 => http::request("PUT", &format!("{ep}/{bucket}"), &[], b""),
            Kind::Gcs => http::request(
                "POST",
                &format!("{ep}/storage/v1/b"),
                &[("Content-Type", "application/json".to_string())],
                format!(r#"{{"name":"{bucket}"}}"#).as_bytes(),
            ),
            Kind::Azure => {
                let path = format!("/{AZURITE_ACCOUNT}/{bucket}");
                let ms = [
                    (
                        "x-ms-date",
                        chrono::Utc::now()
                            .format("%a, %d %b %Y %H:%M:%S GMT")
                            .to_string(),
                    ),
                    ("x-ms-version", "2021-08-06".to_string()),
                ];
                let auth = http::azure_shared_key(
                    "PUT",
                    AZURITE_ACCOUNT,
                    AZURITE_KEY,
                    &path,
                    &[("restype", "container")],
                    &ms,
                );
                let mut headers = ms.to_vec();
                headers.push(("Authorization", auth));
                http::request(
                    "PUT",
                    &format!("{ep}{path}?restype=container"),
                    &headers,
                    b"",
                )
            }
        };
        assert!(
            (200..300).contains(&answer.status),
            "cannot create {:?} bucket {bucket}: HTTP {}: {}",
            self.kind,
            answer.status,
            answer.body
        );
        bucket
    }

    /// An object_store client for `bucket`, for uploads (S3 and Azure).
    pub fn store(&self, bucket: &str) -> Arc<dyn ObjectStore> {
        let ep = &self.service.endpoint;
        let http = ClientOptions::new().with_allow_http(true);
        let built: object_store::Result<Arc<dyn ObjectStore>> = match self.kind {
            Kind::S3 => AmazonS3Builder::new()
                .with_endpoint(ep)
                .with_bucket_name(bucket)
                .with_region("us-east-1")
                .with_access_key_id("sluice-test")
                .with_secret_access_key("sluice-test-secret")
                .with_client_options(http)
                .build()
                .map(|s| Arc::new(s) as _),
            Kind::Gcs => panic!("fake-gcs-server takes no object_store uploads; see `upload`"),
            Kind::Azure => MicrosoftAzureBuilder::new()
                .with_endpoint(format!("{ep}/{AZURITE_ACCOUNT}"))
                .with_account(AZURITE_ACCOUNT)
                .with_access_key(AZURITE_KEY)
                .with_container_name(bucket)
                .with_client_options(http)
                .build()
                .map(|s| Arc::new(s) as _),
        };
        built.unwrap_or_else(|e| panic!("cannot build a {:?} client: {e}", self.kind))
    }

    /// Lets anyone read the objects of an S3 bucket (a bucket policy, as for a
    /// public data set).
    pub fn make_public(&self, bucket: &str) {
        assert_eq!(self.kind, Kind::S3, "bucket policies are S3's");
        let policy = format!(
            r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::{bucket}/*"}}]}}"#
        );
        let url = format!("{}/{bucket}?policy", self.service.endpoint);
        let answer = http::request("PUT", &url, &[], policy.as_bytes());
        assert!(
            answer.status < 300,
            "cannot set the policy of {bucket}: {}",
            answer.body
        );
    }

    /// Writes a key ending in `/` (a directory marker), which object_store's
    /// paths cannot name. S3 only: moto takes unsigned requests.
    pub fn put_marker_dir(&self, bucket: &str, key: &str) {
        assert_eq!(self.kind, Kind::S3, "markers are written to S3 only");
        let url = format!(
            "{}/{bucket}/{}",
            self.service.endpoint,
            http::encode_key(key)
        );
        let answer = http::request("PUT", &url, &[], b"");
        assert_eq!(
            answer.status, 200,
            "cannot write marker {key}: {}",
            answer.body
        );
    }

    /// Uploads every file under `dir` to `bucket` under `prefix`, keeping relative
    /// paths byte for byte (hidden files and `_SUCCESS` included); returns the count.
    pub fn upload(&self, bucket: &str, dir: &Path, prefix: &str) -> usize {
        let mut files = Vec::new();
        walk(dir, dir, &mut files);
        assert!(!files.is_empty(), "nothing to upload in {}", dir.display());
        match self.kind {
            // fake-gcs-server takes no XML API uploads (object_store's `put`):
            // its JSON API media upload instead.
            Kind::Gcs => {
                for (rel, local) in &files {
                    self.gcs_media_upload(bucket, &join_key(prefix, rel), local);
                }
            }
            Kind::S3 | Kind::Azure => put_all(&self.store(bucket), &files, prefix),
        }
        files.len()
    }

    fn gcs_media_upload(&self, bucket: &str, key: &str, local: &Path) {
        let bytes =
            std::fs::read(local).unwrap_or_else(|e| panic!("cannot read {}: {e}", local.display()));
        let url = format!(
            "{}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={}",
            self.service.endpoint,
            http::encode_key(key)
        );
        let answer = http::request(
            "POST",
            &url,
            &[("Content-Type", "application/octet-stream".to_string())],
            &bytes,
        );
        assert_eq!(answer.status, 200, "cannot upload {key}: {}", answer.body);
    }
}

/// Puts every (relative path, local file) under `prefix`, a few at a time.
fn put_all(store: &Arc<dyn ObjectStore>, files: &[(String, PathBuf)], prefix: &str) {
    let puts = files.iter().map(|(rel, local)| {
        let key = KeyPath::parse(join_key(prefix, rel))
            .unwrap_or_else(|e| panic!("{rel} is not a valid object key: {e}"));
        let bytes =
            std::fs::read(local).unwrap_or_else(|e| panic!("cannot read {}: {e}", local.display()));
        let store = Arc::clone(store);
        async move {
            store
                .put(&key, PutPayload::from(bytes))
                .await
                .map_err(|e| format!("cannot upload {key}: {e}"))
        }
    });
    runtime().block_on(async {
        stream::iter(puts)
            .buffer_unordered(8)
            .try_collect::<Vec<_>>()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    });
}

/// `prefix/rel`, or `rel` at the root of the bucket.
fn join_key(prefix: &str, rel: &str) -> String {
    match prefix {
        "" => rel.to_string(),
        _ => format!("{prefix}/{rel}"),
    }
}

/// Every file under `dir` as (path relative to `root` with `/`, full path).
fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            walk(root, &path, out);
        } else {
            let rel = path
                .strip_prefix(root)
                .ok()
                .and_then(|r| r.to_str())
                .unwrap_or_else(|| panic!("not a UTF-8 path under the root: {}", path.display()))
                .to_string();
            out.push((rel, path));
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot start a tokio runtime: {e}"))
}
