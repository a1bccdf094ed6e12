//! Every setting a store reads besides its URL (endpoints, regions,
//! credentials, proxies, emulator hosts, `SLUICE_CATALOG`) is checked
//! before any client is built: a malformed value exits 64 with one line
//! naming the variable, and never panics (object_store panics on the first
//! request to an endpoint without a scheme: issue 53).

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{assert_one_line_error, run, sluice_command};

/// Values no URL setting may have: no scheme, a port past 65535, a space,
/// a character that is not ASCII, nothing.
const BAD_URLS: [&str; 5] = [
    "127.0.0.1:9300",
    "http://127.0.0.1:99999",
    "http://lake :9300",
    "http://läke:9300",
    "",
];

/// Values no host setting (`HOST:PORT`, no scheme needed) may have.
const BAD_HOSTS: [&str; 4] = ["127.0.0.1:99999", "la ke:4443", "läke:4443", ""];

/// Values no region or name may have.
const BAD_NAMES: [&str; 4] = ["eu west 1", "eu-wëst-1", "eu/west", ""];

/// Values no credential may have (and that are never shown).
const BAD_SECRETS: [&str; 3] = ["secret with spaces", "schlüssel", ""];

/// Values no proxy may have (`HOST:PORT` without a scheme is one).
const BAD_PROXIES: [&str; 3] = ["proxy:99999", "pro xy:3128", "pröxy:3128"];

/// A sluice command with no store settings inherited, a backtrace asked
/// for (a panic would show one), and `env` set.
fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = sluice_command(args);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let store = ["AWS_", "GOOGLE_", "AZURE_", "AZURITE_", "GCE_", "SLUICE_"]
            .iter()
            .any(|p| key.starts_with(p));
        let proxy = key.to_ascii_uppercase().ends_with("_PROXY");
        if store || proxy || key == "STORAGE_EMULATOR_HOST" || key == "IDENTITY_ENDPOINT" {
            cmd.env_remove(key.as_ref());
        }
    }
    cmd.env("RUST_BACKTRACE", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Runs `args` with `env` and `name=value`, and checks that it was refused
/// at once: exit 64, one line naming `name`, no panic, no backtrace, and
/// the value not shown when `secret`.
#[track_caller]
fn refused(args: &[&str], env: &[(&str, &str)], name: &str, value: &str, secret: bool) {
    let mut all = env.to_vec();
    all.push((name, value));
    let started = Instant::now();
    let out = run(&mut command(args, &all));
    let took = started.elapsed();
    let what = format!("{name}={value:?}: {out}");
    assert!(
        took < Duration::from_secs(5),
        "refused after {took:?}: {what}"
    );
    assert_eq!(out.status.code(), Some(64), "a usage error: {what}");
    assert!(!out.stderr.contains("backtrace"), "a backtrace: {what}");
    assert_one_line_error(&out, &[name]);
    if secret && !value.is_empty() {
        assert!(!out.stderr.contains(value), "the secret shown: {what}");
    }
}

#[test]
fn an_endpoint_without_a_scheme_is_refused_not_a_panic() {
    // The finding as it was reported.
    refused(
        &["ls", "s3://lake/clicks"],
        &[],
        "AWS_ENDPOINT_URL",
        "127.0.0.1:9300",
        false,
    );
}

#[test]
fn every_malformed_s3_setting_is_one_line_naming_its_variable() {
    let ls = ["ls", "s3://lake/clicks"];
    let endpoint = [("AWS_ENDPOINT_URL", "http://127.0.0.1:1")];
    for name in [
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT",
        "AWS_ENDPOINT_URL_S3",
        "AWS_METADATA_ENDPOINT",
        "AWS_ENDPOINT_URL_STS",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ] {
        for value in BAD_URLS {
            refused(&ls, &[], name, value, false);
        }
    }
    for name in ["AWS_REGION", "AWS_DEFAULT_REGION", "AWS_BUCKET"] {
        for value in BAD_NAMES {
            refused(&ls, &endpoint, name, value, false);
        }
    }
    for name in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
    ] {
        for value in BAD_SECRETS {
            refused(&ls, &endpoint, name, value, true);
        }
    }
    for value in ["maybe", ""] {
        refused(&ls, &endpoint, "AWS_ALLOW_HTTP", value, false);
    }
    for value in ["v2/credentials", "/v2/cred entials", ""] {
        refused(
            &ls,
            &endpoint,
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            value,
            false,
        );
    }
}

#[test]
fn every_malformed_proxy_is_one_line_naming_its_variable() {
    let endpoint = [("AWS_ENDPOINT_URL", "http://127.0.0.1:1")];
    for (url, own) in [
        ("s3://lake/clicks", "AWS_PROXY_URL"),
        ("gs://lake/clicks", "GOOGLE_PROXY_URL"),
        ("az://lake/clicks", "AZURE_PROXY_URL"),
    ] {
        for name in ["HTTPS_PROXY", "http_proxy", "ALL_PROXY", own] {
            for value in BAD_PROXIES {
                refused(&["ls", url], &endpoint, name, value, false);
            }
        }
        refused(&["ls", url], &endpoint, own, "", false);
    }
}

#[test]
fn every_malformed_gcs_and_azure_setting_is_one_line_naming_its_variable() {
    let gs = ["ls", "gs://lake/clicks"];
    for value in BAD_URLS {
        refused(&gs, &[], "GOOGLE_BASE_URL", value, false);
    }
    for name in ["STORAGE_EMULATOR_HOST", "GCE_METADATA_HOST"] {
        for value in BAD_HOSTS {
            refused(&gs, &[], name, value, false);
        }
    }
    let az = ["ls", "az://lake/clicks"];
    let account = [("AZURE_STORAGE_ACCOUNT_NAME", "acct")];
    let emulator = [("AZURE_STORAGE_USE_EMULATOR", "true")];
    for value in BAD_URLS {
        refused(&az, &account, "AZURE_STORAGE_ENDPOINT", value, false);
        refused(&az, &emulator, "AZURITE_BLOB_STORAGE_URL", value, false);
        refused(&az, &account, "AZURE_AUTHORITY_HOST", value, false);
    }
    for value in BAD_NAMES {
        refused(&az, &[], "AZURE_STORAGE_ACCOUNT_NAME", value, false);
        refused(&az, &account, "AZURE_TENANT_ID", value, false);
    }
    for value in BAD_SECRETS {
        refused(&az, &account, "AZURE_STORAGE_ACCOUNT_KEY", value, true);
        refused(&az, &account, "AZURE_STORAGE_SAS_TOKEN", value, true);
    }
}

#[test]
fn a_malformed_bucket_or_catalog_is_one_line_too() {
    let endpoint = [("AWS_ENDPOINT_URL", "http://127.0.0.1:1")];
    for url in ["s3://la ke/clicks", "s3://läke/clicks", "gs://la ke/x"] {
        let out = run(&mut command(&["ls", url], &endpoint));
        assert_eq!(out.status.code(), Some(64), "a usage error: {out}");
        assert_one_line_error(&out, &["bucket name"]);
    }
    for value in [
        "thrift://hms :9083",
        "thrift://hms:99999",
        "http://kätalog:8181",
    ] {
        refused(&["ls", "db.clicks"], &[], "SLUICE_CATALOG", value, false);
    }
}
