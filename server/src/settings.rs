//! Server settings, layered: built-in defaults, then a TOML file
//! (`--config`), then `VRAMSCOPE_…` environment variables (nested keys with
//! `__`, e.g. `VRAMSCOPE_S3__ENDPOINT`), then command-line flags.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

use crate::store::{BlobStore, Db, S3Settings};

/// The example configuration shipped with the binary (`vramscope serve --print-config`).
pub(crate) const EXAMPLE_CONFIG: &str = include_str!("../../assets/server.example.toml");

/// Top-level setting names, as they appear in TOML and after `VRAMSCOPE_`.
const SETTING_NAMES: &[&str] = &[
    "bind",
    "data_dir",
    "database_url",
    "blob_store",
    "s3",
    "max_upload_bytes",
    "inline_parse_max_bytes",
    "parse_concurrency",
    "parse_memory_budget",
    "analysis_concurrency",
    "parse_timeout_secs",
    "max_expansion",
    "max_body_bytes",
    "report_inline_max_bytes",
    "allowed_hosts",
    "cache_entries",
    "cache_bytes",
    "index_cache_bytes",
    "request_timeout_secs",
    "header_read_timeout_secs",
    "upload_idle_timeout_secs",
    "upload_min_bytes_per_sec",
    "upload_rate_window_secs",
    "multipart_preamble_max_bytes",
    "upload_lookahead_bytes",
    "shutdown_index_wait_secs",
    "cors_allowed_origins",
    "require_tokens",
    "trusted_proxies",
    "max_comments_per_snapshot",
    "retention_days",
    "retention_max_bytes",
    "retention_interval_secs",
    "telemetry_keep_days",
    "telemetry_max_sources_per_token",
];

/// Everything `vramscope serve` can be told.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Settings {
    /// Address to listen on.
    pub(crate) bind: SocketAddr,
    /// Folder for the embedded database and the local snapshot store.
    pub(crate) data_dir: PathBuf,
    /// `sqlite://…` or `postgres://…`; default: SQLite in `data_dir`.
    pub(crate) database_url: Option<String>,
    /// A folder path, `file:///…` or `s3://bucket/prefix`; default: `data_dir/blobs`.
    pub(crate) blob_store: Option<String>,
    /// Endpoint and credentials for an `s3://` blob store.
    pub(crate) s3: S3Settings,
    /// Largest accepted upload, in bytes (larger ones get 413).
    pub(crate) max_upload_bytes: u64,
    /// Uploads up to this size are parsed before the upload is answered, so a
    /// bad file gets 422 and is not kept; larger ones are parsed in the
    /// background (the reader needs about the file's size in memory).
    pub(crate) inline_parse_max_bytes: u64,
    /// Snapshots parsed at the same time.
    pub(crate) parse_concurrency: usize,
    /// Threads the analysis routes (replays, rankings, post-mortems, leaks,
    /// comparisons) share; requests about one snapshot also wait in line.
    pub(crate) analysis_concurrency: usize,
    /// Most memory one parse may hold, in bytes. Default: twice
    /// `max_upload_bytes`, and never more than three quarters of the
    /// machine's memory shared by `parse_concurrency` parses.
    pub(crate) parse_memory_budget: Option<u64>,
    /// A parse still running after this many seconds is stopped and its
    /// snapshot marked failed (reading is linear in the file, so only a
    /// hostile or broken file gets there).
    pub(crate) parse_timeout_secs: f64,
    /// Most bytes of pickle a gzip or zstd upload may give per compressed
    /// byte (real snapshots: 4 to 20).
    pub(crate) max_expansion: u32,
    /// Largest body of any request but an upload (comments, edits), in bytes.
    pub(crate) max_body_bytes: usize,
    /// Largest snapshot whose exported report inlines the file (the page
    /// holds it as base64 and opens it in the dashboard). A larger one gets
    /// a report made from its index alone: findings and the main chart.
    pub(crate) report_inline_max_bytes: u64,
    /// Host names (with or without a port) that requests may name in `Host`
    /// besides the bound address, `localhost` and the loopback addresses.
    /// Checked only without tokens, where a request's origin is its only
    /// credential: it stops DNS rebinding.
    pub(crate) allowed_hosts: Vec<String>,
    /// Parsed snapshots kept in memory for timeline queries.
    pub(crate) cache_entries: usize,
    /// About how much memory they may hold together, in bytes (the newest
    /// is kept whatever its size). Default: a quarter of the machine's.
    pub(crate) cache_bytes: Option<u64>,
    /// With an S3 blob store: most bytes of persisted indexes this
    /// instance keeps copies of in `data_dir/index-cache` (least recently
    /// used out). A local store keeps every index beside its file.
    pub(crate) index_cache_bytes: u64,
    /// Seconds before a request other than an upload or download times out.
    pub(crate) request_timeout_secs: u64,
    /// Seconds a client has to send a request's headers before its
    /// connection is closed (slowloris).
    pub(crate) header_read_timeout_secs: f64,
    /// Seconds an upload may send nothing before it is cut off and its
    /// staged bytes removed (a client that declared a size and stalled).
    pub(crate) upload_idle_timeout_secs: f64,
    /// Slowest average an upload may arrive at, in bytes a second, over
    /// each `upload_rate_window_secs` the server waits for it: a client
    /// dripping a byte now and then (never silent for long) is cut off.
    pub(crate) upload_min_bytes_per_sec: f64,
    /// The window, in seconds of waiting for the client, over which
    /// `upload_min_bytes_per_sec` is measured.
    pub(crate) upload_rate_window_secs: f64,
    /// Most bytes a multipart upload may send before its first boundary
    /// (the preamble, which browsers leave empty).
    pub(crate) multipart_preamble_max_bytes: u64,
    /// Most bytes of an upload read ahead of its storage and parse: enough
    /// for what the sockets hold, so that a client that leaves is noticed
    /// (and its staged bytes removed) at once, not at the parse's pace.
    pub(crate) upload_lookahead_bytes: u64,
    /// Most seconds a graceful stop waits for the index files being
    /// written behind answers (large snapshots), so that the next start
    /// opens them instead of parsing the files again.
    pub(crate) shutdown_index_wait_secs: f64,
    /// Origins allowed by CORS; empty (the default) means same-origin only.
    pub(crate) cors_allowed_origins: Vec<String>,
    /// Require API tokens even on a loopback address (always required on others).
    pub(crate) require_tokens: bool,
    /// Addresses (`10.0.0.5`) or networks (`10.0.0.0/24`, `::1/128`) of the
    /// proxies in front of this server (nginx, a load balancer): from them
    /// alone `X-Forwarded-For` is read for the client's address, which
    /// wrong-token limits count by. Default: none, so the header is
    /// ignored and every client is its connection's address.
    pub(crate) trusted_proxies: Vec<String>,
    /// Most comments one snapshot may have: any viewer may comment, and a
    /// thread is answered whole (at most 16 KiB a comment).
    pub(crate) max_comments_per_snapshot: u64,
    /// Retention: delete snapshots uploaded more than this many days ago
    /// (never pinned or commented ones). Off when absent.
    pub(crate) retention_days: Option<u64>,
    /// Retention: delete the oldest snapshot files while all of them
    /// together are larger than this (bytes). Off when absent.
    pub(crate) retention_max_bytes: Option<u64>,
    /// Seconds between two runs of the retention policy in `serve`.
    pub(crate) retention_interval_secs: u64,
    /// Live-telemetry sources with no sample for this many days are deleted.
    pub(crate) telemetry_keep_days: u64,
    /// Most live-telemetry sources (processes) one token's agents may
    /// create (without tokens: all of them together); a batch naming a new
    /// one past it is refused for that source.
    pub(crate) telemetry_max_sources_per_token: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("vramscope-data"),
            database_url: None,
            blob_store: None,
            s3: S3Settings::default(),
            max_upload_bytes: 4 << 30,
            inline_parse_max_bytes: 256 << 20,
            parse_concurrency: 2,
            parse_memory_budget: None,
            analysis_concurrency: 2,
            parse_timeout_secs: 600.0,
            max_expansion: vramscope_shared::DEFAULT_MAX_EXPANSION,
            max_body_bytes: 256 << 10,
            report_inline_max_bytes: 256 << 20,
            allowed_hosts: Vec::new(),
            cache_entries: 4,
            cache_bytes: None,
            index_cache_bytes: 16 << 30,
            request_timeout_secs: 60,
            header_read_timeout_secs: 30.0,
            upload_idle_timeout_secs: 60.0,
            upload_min_bytes_per_sec: 1024.0,
            upload_rate_window_secs: 60.0,
            multipart_preamble_max_bytes: 8192,
            upload_lookahead_bytes: 16 << 20,
            shutdown_index_wait_secs: 120.0,
            cors_allowed_origins: Vec::new(),
            require_tokens: false,
            trusted_proxies: Vec::new(),
            max_comments_per_snapshot: 1000,
            retention_days: None,
            retention_max_bytes: None,
            retention_interval_secs: 3600,
            telemetry_keep_days: 14,
            telemetry_max_sources_per_token: 4096,
        }
    }
}

/// Flags of `vramscope serve` that override the layered settings.
#[derive(Debug, Default, Clone, clap::Args)]
pub(crate) struct SettingsArgs {
    /// Address and port to listen on (default 127.0.0.1:8080).
    #[arg(long)]
    pub(crate) bind: Option<SocketAddr>,
    /// Folder for the embedded database and snapshot files (default ./vramscope-data).
    #[arg(long)]
    pub(crate) data_dir: Option<PathBuf>,
    /// TOML configuration file.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Team mode: `postgres://user@host/db` (default: SQLite in the data folder).
    #[arg(long)]
    pub(crate) database_url: Option<String>,
    /// Team mode: `s3://bucket/prefix` (endpoint and credentials from config or env).
    #[arg(long)]
    pub(crate) blob_store: Option<String>,
}

impl Settings {
    /// Open the database and blob store the settings name.
    pub(crate) async fn open_stores(&self) -> anyhow::Result<(Db, BlobStore)> {
        if self.database_url.is_none() || self.blob_store.is_none() {
            std::fs::create_dir_all(&self.data_dir)
                .with_context(|| format!("cannot create the data folder {}", self.data_dir.display()))?;
        }
        let db = Db::connect(&self.database_url()).await.context("cannot open the database")?;
        let blobs = BlobStore::from_url(&self.blob_store(), &self.s3).context("cannot open the blob store")?;
        Ok((db, blobs))
    }

    /// Load the layers and apply the flags.
    pub(crate) fn load(args: &SettingsArgs) -> anyhow::Result<Settings> {
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        if let Some(path) = &args.config {
            anyhow::ensure!(path.is_file(), "configuration file not found: {}", path.display());
            figment = figment.merge(Toml::file_exact(path));
        }
        // Only the variables that name a setting: VRAMSCOPE_CORPUS and the
        // test harness's VRAMSCOPE_TEST_* are not configuration.
        let env = Env::prefixed("VRAMSCOPE_")
            .filter(|key| {
                let top = key.as_str().split("__").next().unwrap_or_default().to_ascii_lowercase();
                SETTING_NAMES.contains(&top.as_str())
            })
            .split("__");
        figment = figment.merge(env);
        let mut settings: Settings = figment.extract().context("invalid configuration")?;
        if let Some(bind) = args.bind {
            settings.bind = bind;
        }
        if let Some(dir) = &args.data_dir {
            settings.data_dir = dir.clone();
        }
        if let Some(url) = &args.database_url {
            settings.database_url = Some(url.clone());
        }
        if let Some(url) = &args.blob_store {
            settings.blob_store = Some(url.clone());
        }
        anyhow::ensure!(settings.parse_concurrency > 0, "parse_concurrency must be at least 1");
        anyhow::ensure!(
            settings.upload_min_bytes_per_sec.is_finite() && settings.upload_min_bytes_per_sec >= 0.0,
            "upload_min_bytes_per_sec must be a number of bytes a second, 0 or more"
        );
        for (name, secs) in [
            ("parse_timeout_secs", settings.parse_timeout_secs),
            ("header_read_timeout_secs", settings.header_read_timeout_secs),
            ("upload_idle_timeout_secs", settings.upload_idle_timeout_secs),
            ("upload_rate_window_secs", settings.upload_rate_window_secs),
            ("shutdown_index_wait_secs", settings.shutdown_index_wait_secs),
        ] {
            anyhow::ensure!(secs.is_finite() && secs > 0.0, "{name} must be a positive number of seconds");
        }
        settings.trusted_proxies()?;
        anyhow::ensure!(
            !settings.cors_allowed_origins.iter().any(|o| o == "*") || settings.tokens_required(),
            "cors_allowed_origins = [\"*\"] lets any web page call this server, which without tokens \
             (a loopback address, require_tokens = false) is anyone's admin: list the origins, or require tokens"
        );
        Ok(settings)
    }

    /// The memory budget of one parse: `parse_memory_budget`, or twice the
    /// largest upload, capped so that `parse_concurrency` parses fit in three
    /// quarters of the machine's memory.
    pub(crate) fn parse_budget(&self) -> u64 {
        if let Some(budget) = self.parse_memory_budget {
            return budget;
        }
        let wanted = self.max_upload_bytes.saturating_mul(2);
        match crate::machine::memory_bytes() {
            Some(total) => wanted.min(total / 4 * 3 / self.parse_concurrency as u64),
            None => wanted,
        }
    }

    /// The analysis cache's byte budget: `cache_bytes`, or a quarter of the
    /// machine's memory (4 GiB where that is unknown).
    pub(crate) fn cache_budget(&self) -> u64 {
        self.cache_bytes.unwrap_or_else(|| crate::machine::memory_bytes().map_or(4 << 30, |m| m / 4))
    }

    /// How the server reads stored snapshots (the cancel flag is set per parse).
    pub(crate) fn read_options(&self) -> vramscope_shared::ReadOptions {
        vramscope_shared::ReadOptions {
            memory_budget: self.parse_budget(),
            max_expansion: Some(self.max_expansion),
            cancel: None,
        }
    }

    /// The database URL, defaulting to SQLite in the data folder.
    pub(crate) fn database_url(&self) -> String {
        self.database_url.clone().unwrap_or_else(|| Db::sqlite_url(&absolute(&self.data_dir.join("vramscope.db"))))
    }

    /// The blob store location, defaulting to a folder in the data folder.
    pub(crate) fn blob_store(&self) -> String {
        self.blob_store.clone().unwrap_or_else(|| absolute(&self.data_dir.join("blobs")).display().to_string())
    }

    /// `trusted_proxies` read as networks (an address is its own /32 or
    /// /128).
    pub(crate) fn trusted_proxies(&self) -> anyhow::Result<Vec<ipnet::IpNet>> {
        self.trusted_proxies
            .iter()
            .map(|entry| {
                let entry = entry.trim();
                entry
                    .parse::<ipnet::IpNet>()
                    .or_else(|_| entry.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                    .map_err(|_| {
                        anyhow::anyhow!(
                            "trusted_proxies: {:?} is neither an IP address nor a network (10.0.0.0/24)",
                            entry.chars().take(64).collect::<String>()
                        )
                    })
            })
            .collect()
    }

    /// Whether requests must carry a token: always off loopback.
    pub(crate) fn tokens_required(&self) -> bool {
        self.require_tokens || !self.bind.ip().is_loopback()
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_config_is_valid_and_matches_the_defaults() {
        let from_example: Settings = Figment::from(Serialized::defaults(Settings::default()))
            .merge(Toml::string(EXAMPLE_CONFIG))
            .extract()
            .expect("example parses");
        let defaults = Settings::default();
        assert_eq!(from_example.bind, defaults.bind);
        assert_eq!(from_example.max_upload_bytes, defaults.max_upload_bytes);
        assert_eq!(from_example.inline_parse_max_bytes, defaults.inline_parse_max_bytes);
        assert!(!from_example.tokens_required());
    }

    #[test]
    fn the_parse_budget_follows_the_upload_limit_and_the_machine() {
        let small = Settings { max_upload_bytes: 64 << 20, ..Settings::default() };
        assert_eq!(small.parse_budget(), 128 << 20);
        let huge = Settings { max_upload_bytes: 1 << 50, ..Settings::default() };
        let total = crate::machine::memory_bytes().expect("this machine's memory is known");
        assert_eq!(huge.parse_budget(), total / 4 * 3 / 2, "never more than the machine has");
        let set = Settings { parse_memory_budget: Some(12345), ..Settings::default() };
        assert_eq!(set.parse_budget(), 12345);
    }

    #[test]
    fn regression_cors_star_without_tokens_is_refused_not_a_panic() {
        let dir = std::env::temp_dir().join(format!("vramscope-cors-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).expect("dir");
        let config = dir.join("c.toml");
        std::fs::write(&config, "cors_allowed_origins = [\"*\"]\n").expect("write");
        let args = SettingsArgs { config: Some(config.clone()), ..Default::default() };
        let err = Settings::load(&args).expect_err("refused");
        assert!(format!("{err:#}").contains("require tokens"), "{err:#}");
        let args =
            SettingsArgs { config: Some(config), bind: Some("0.0.0.0:0".parse().expect("addr")), ..Default::default() };
        assert!(Settings::load(&args).is_ok(), "with tokens, * is allowed");
    }

    #[test]
    fn flags_override_files_and_non_loopback_needs_tokens() {
        let args = SettingsArgs { bind: Some("0.0.0.0:9000".parse().expect("addr")), ..Default::default() };
        let s = Settings::load(&args).expect("load");
        assert_eq!(s.bind.port(), 9000);
        assert!(s.tokens_required());
        assert!(s.database_url().starts_with("sqlite://"));
    }
}
