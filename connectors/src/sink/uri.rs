//! Paths as a sink's log records them, mapped into the dataset's store.
//!
//! Spark records each file as a qualified Hadoop URI, URL-encoded
//! (`file:/d/part-0`, `file:///d/part-0`, `hdfs://nn:8020/d/part-0`,
//! `s3a://bucket/d/k=a%253Ab/part-0`), whatever URL the dataset is read with
//! now: `s3a://` or `s3n://` for an `s3://` dataset, an HDFS authority with or
//! without the default port, an ABFS URL for an `az://` container.

use object_store::path::{Path, PathPart};
use percent_encoding::percent_decode_str;

/// The port of an HDFS namenode when a URL names none.
const HDFS_DEFAULT_PORT: u16 = 8020;

/// A filesystem or bucket, as far as telling two URLs apart goes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Store {
    Local,
    Hdfs {
        host: String,
        port: u16,
    },
    ViewFs(String),
    S3(String),
    Gcs(String),
    Azure {
        container: String,
        account: Option<String>,
    },
}

impl Store {
    /// The store of a URL's scheme and authority.
    fn of(scheme: &str, authority: &str) -> Result<Store, String> {
        let authority = authority.trim_end_matches('/');
        match scheme.to_ascii_lowercase().as_str() {
            "file" if authority.is_empty() || authority.eq_ignore_ascii_case("localhost") => {
                Ok(Store::Local)
            }
            "file" => Err(format!("a file URL on host `{authority}`")),
            "hdfs" => Ok(hdfs(authority)),
            "viewfs" => Ok(Store::ViewFs(authority.to_ascii_lowercase())),
            "s3" | "s3a" | "s3n" => Ok(Store::S3(authority.to_string())),
            "gs" => Ok(Store::Gcs(authority.to_string())),
            "az" | "abfs" | "abfss" | "wasb" | "wasbs" => Ok(azure(authority)),
            other => Err(format!("unknown scheme `{other}`")),
        }
    }

    /// Whether both name the same filesystem or bucket (an Azure account
    /// counts only where both URLs name one).
    fn same(&self, other: &Store) -> bool {
        match (self, other) {
            (
                Store::Azure {
                    container: a,
                    account: x,
                },
                Store::Azure {
                    container: b,
                    account: y,
                },
            ) => a == b && (x.is_none() || y.is_none() || x == y),
            _ => self == other,
        }
    }
}

/// An HDFS authority: `host[:port]`, the port 8020 when absent.
fn hdfs(authority: &str) -> Store {
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => match port.parse() {
            Ok(port) => (host, port),
            Err(_) => (authority, HDFS_DEFAULT_PORT),
        },
        None => (authority, HDFS_DEFAULT_PORT),
    };
    Store::Hdfs {
        host: host.to_ascii_lowercase(),
        port,
    }
}

/// An Azure authority: `container` or `container@account.dfs.core.windows.net`.
fn azure(authority: &str) -> Store {
    match authority.split_once('@') {
        Some((container, host)) => Store::Azure {
            container: container.to_string(),
            account: host.split('.').next().map(str::to_ascii_lowercase),
        },
        None => Store::Azure {
            container: authority.to_string(),
            account: None,
        },
    }
}

/// A URI cut into scheme, authority and (still encoded) path.
struct Parts<'a> {
    scheme: Option<&'a str>,
    authority: &'a str,
    path: &'a str,
}

/// Cuts `scheme://authority/path`, `scheme:/path` or a bare absolute `/path`.
fn split(uri: &str) -> Result<Parts<'_>, String> {
    if let Some((scheme, rest)) = uri.split_once("://") {
        let at = rest.find('/').unwrap_or(rest.len());
        return Ok(Parts {
            scheme: Some(scheme),
            authority: &rest[..at],
            path: &rest[at..],
        });
    }
    if uri.starts_with('/') {
        return Ok(Parts {
            scheme: None,
            authority: "",
            path: uri,
        });
    }
    match uri.split_once(':') {
        Some((scheme, path)) if path.starts_with('/') && is_scheme(scheme) => Ok(Parts {
            scheme: Some(scheme),
            authority: "",
            path,
        }),
        _ => Err("not an absolute path or URI".to_string()),
    }
}

/// Whether `s` can be a URI scheme.
fn is_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Where the file `uri` lies in the store whose URLs start with `base`
/// (`file://`, `s3://bucket`, `hdfs://nn:8020`...), or why it lies elsewhere.
pub(crate) fn store_path(base: &str, uri: &str) -> Result<Path, String> {
    let file = split(uri).map_err(|e| format!("{uri} is {e}"))?;
    if let Some(scheme) = file.scheme {
        let here = split(base)
            .ok()
            .and_then(|b| Store::of(b.scheme.unwrap_or("file"), b.authority).ok());
        let there = Store::of(scheme, file.authority).map_err(|e| format!("{uri}: {e}"))?;
        if !here.is_some_and(|here| here.same(&there)) {
            return Err(format!("{uri} is in another store than {base}"));
        }
    }
    let decoded = percent_decode_str(file.path)
        .decode_utf8()
        .map_err(|_| format!("{uri} is not UTF-8 once decoded"))?;
    let mut path = Path::default();
    for part in decoded.split('/').filter(|p| !p.is_empty() && *p != ".") {
        if part == ".." {
            return Err(format!("{uri} is not a normalized path"));
        }
        path = path.join(PathPart::parse(part).unwrap_or_else(|_| PathPart::from(part)));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped(base: &str, uri: &str) -> String {
        store_path(base, uri)
            .unwrap_or_else(|e| panic!("{uri} in {base}: {e}"))
            .to_string()
    }

    fn refused(base: &str, uri: &str) -> String {
        store_path(base, uri).expect_err(uri)
    }

    #[test]
    fn local_paths_with_one_or_three_slashes() {
        assert_eq!(
            mapped("file://", "file:/d/part-0.parquet"),
            "d/part-0.parquet"
        );
        assert_eq!(
            mapped("file://", "file:///d/part-0.parquet"),
            "d/part-0.parquet"
        );
        assert_eq!(mapped("file://", "file://localhost/d/p"), "d/p");
        assert_eq!(mapped("file://", "/d/p"), "d/p");
        assert!(refused("file://", "hdfs://nn:8020/d/p").contains("another store"));
        assert!(refused("file://", "file://otherhost/d/p").contains("otherhost"));
    }

    #[test]
    fn names_are_decoded_once() {
        // Hadoop encodes a `%` of a partition directory (`k=a%3Ab` on disk).
        assert_eq!(
            mapped("s3://b", "s3a://b/out/k=a%253Ab/part%20x.parquet"),
            "out/k=a%3Ab/part x.parquet"
        );
        assert!(refused("file://", "file:/d/%2E%2E/x").contains("not a normalized"));
    }

    #[test]
    fn s3_schemes_name_the_same_bucket() {
        for uri in ["s3://b/d/p", "s3a://b/d/p", "s3n://b/d/p"] {
            assert_eq!(mapped("s3://b", uri), "d/p");
            assert_eq!(mapped("s3a://b", uri), "d/p");
        }
        assert!(refused("s3://b", "s3a://other/d/p").contains("another store"));
        assert!(refused("s3://b", "gs://b/d/p").contains("another store"));
    }

    #[test]
    fn hdfs_ports_default_to_8020() {
        assert_eq!(mapped("hdfs://nn:8020", "hdfs://nn/d/p"), "d/p");
        assert_eq!(mapped("hdfs://nn", "hdfs://NN:8020/d/p"), "d/p");
        assert_eq!(mapped("hdfs://cluster", "hdfs://cluster/d/p"), "d/p");
        assert!(refused("hdfs://nn:9000", "hdfs://nn/d/p").contains("another store"));
        assert!(refused("hdfs://nn:8020", "hdfs://other:8020/d/p").contains("another store"));
        assert!(refused("hdfs://nn:8020", "viewfs://nn/d/p").contains("another store"));
    }

    #[test]
    fn azure_containers_by_any_scheme() {
        let abfs = "abfss://c@acct.dfs.core.windows.net/d/p";
        assert_eq!(mapped("az://c", abfs), "d/p");
        assert_eq!(
            mapped(
                "abfss://c@acct.dfs.core.windows.net",
                "wasbs://c@acct.blob.core.windows.net/d/p"
            ),
            "d/p"
        );
        assert!(refused("abfss://c@other.dfs.core.windows.net", abfs).contains("another store"));
        assert!(refused("az://c2", abfs).contains("another store"));
    }

    #[test]
    fn relative_and_unknown_are_refused() {
        assert!(refused("file://", "d/p").contains("not an absolute"));
        assert!(refused("s3://b", "ftp://b/d/p").contains("unknown scheme `ftp`"));
    }
}
