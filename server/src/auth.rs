//! API tokens: `vs_<id>_<secret>`, stored as an argon2 hash of the secret.
//!
//! Roles are ordered: a viewer reads, an uploader also uploads and edits
//! metadata, an admin also deletes. Verified tokens are remembered for a few
//! minutes (keyed by a SHA-256 of the token) because argon2 is slow by design.
//!
//! Wrong secrets are counted per client address and token id together: a
//! client past [`FAILURES_PER_MINUTE`] for one id is answered 429 (without
//! hashing) until its minute ends, while the holder, asking from anywhere
//! else, is checked as usual. A correct secret is never refused for
//! failures from elsewhere, and one that verified once since start-up is
//! let through even from the guessing address.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use hmac::{Hmac, Mac};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::store::{Db, TokenRecord};

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Role {
    /// Read snapshots and views.
    Viewer,
    /// Also upload, rename and tag.
    Uploader,
    /// Also delete.
    Admin,
}

impl Role {
    /// The role's name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Uploader => "uploader",
            Role::Admin => "admin",
        }
    }

    fn parse(s: &str) -> Option<Role> {
        match s {
            "viewer" => Some(Role::Viewer),
            "uploader" => Some(Role::Uploader),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

/// Who made a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    /// The token's name (e.g. a person or a job), or `local` without tokens.
    pub(crate) name: String,
    /// Its role.
    pub(crate) role: Role,
    /// The token's id (`None` without tokens): what owns a comment, since
    /// names are not unique.
    pub(crate) token_id: Option<String>,
}

/// How long a verified secret is trusted without hashing it again. The
/// token's record is still read at every request, so a revoked token or a
/// changed role takes effect at once, on every instance.
const VERIFIED_FOR: Duration = Duration::from_secs(300);

/// How long a token that failed its check is refused without hashing again.
const REFUSED_FOR: Duration = Duration::from_secs(300);
/// Most argon2 checks of wrong secrets per client address and token id in
/// a minute: past that, that client's guesses for that id are answered 429
/// without hashing (each check costs 19 MiB and tens of milliseconds, by
/// design) until the minute ends.
const FAILURES_PER_MINUTE: u32 = 10;
/// The window [`FAILURES_PER_MINUTE`] counts in.
const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Most argon2 checks running at once.
const HASHING_AT_ONCE: usize = 2;
/// Most entries in each of the remembered-token tables.
const REMEMBERED: usize = 10_000;

/// Who the wrong-secret limit counts: a client address (`None`: unknown)
/// and a token id.
type Guesser = (Option<IpAddr>, String);

/// The address the wrong-secret limit counts a client by: an IPv6 client
/// by its /64 (one host is handed a whole /64 and can take any address in
/// it, so counting single addresses would not limit it), an IPv4-mapped
/// one as the IPv4 address it is.
fn counted_as(client: Option<IpAddr>) -> Option<IpAddr> {
    client.map(|ip| match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
        v4 => v4,
    })
}

/// Token checks for the API.
pub(crate) struct Auth {
    required: bool,
    db: Db,
    /// Tokens (by SHA-256) whose secret verified: the stored hash it
    /// verified against, and when.
    verified: Mutex<HashMap<[u8; 32], (String, Instant)>>,
    /// Tokens (by SHA-256) that failed, and when.
    refused: Mutex<HashMap<[u8; 32], Instant>>,
    /// Failures per (client address, token id) in the current minute:
    /// (window start, count). `None`: a request without a known peer.
    failures: Mutex<HashMap<Guesser, (Instant, u32)>>,
    /// SHA-256 of the token that last verified, per token id, for as long
    /// as the process runs: a holder asking from an address that guessed
    /// too much is still let through (its record is read again each time,
    /// so a deleted token stops working).
    known: Mutex<HashMap<String, [u8; 32]>>,
    hashing: tokio::sync::Semaphore,
    hashes: std::sync::atomic::AtomicU64,
}

impl Auth {
    /// `required` is false only in the loopback-only default mode.
    pub(crate) fn new(db: Db, required: bool) -> Auth {
        Auth {
            required,
            db,
            verified: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            known: Mutex::new(HashMap::new()),
            hashing: tokio::sync::Semaphore::new(HASHING_AT_ONCE),
            hashes: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Token secrets checked with argon2 since start.
    pub(crate) fn hashes(&self) -> u64 {
        self.hashes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How long `client` must wait before a secret for `id` is hashed
    /// again: `None` while it is under [`FAILURES_PER_MINUTE`].
    fn limited(&self, client: Option<IpAddr>, id: &str) -> Option<Duration> {
        let client = counted_as(client);
        let Ok(failures) = self.failures.lock() else { return Some(FAILURE_WINDOW) };
        let (since, n) = failures.get(&(client, id.to_owned()))?;
        let left = FAILURE_WINDOW.checked_sub(since.elapsed())?;
        (*n >= FAILURES_PER_MINUTE && !left.is_zero()).then_some(left)
    }

    /// Remember a failed check: the token itself, and one more for this
    /// client and id.
    fn failed(&self, key: [u8; 32], client: Option<IpAddr>, id: &str) {
        let client = counted_as(client);
        if let Ok(mut refused) = self.refused.lock() {
            if refused.len() >= REMEMBERED {
                refused.retain(|_, at| at.elapsed() < REFUSED_FOR);
            }
            if refused.len() < REMEMBERED {
                refused.insert(key, Instant::now());
            }
        }
        if let Ok(mut failures) = self.failures.lock() {
            if failures.len() >= REMEMBERED {
                failures.retain(|_, (since, _)| since.elapsed() < FAILURE_WINDOW);
            }
            if failures.len() >= REMEMBERED {
                // Every slot is a client guessing now: count this one
                // under the unknown address rather than grow without end.
                let entry = failures.entry((None, id.to_owned())).or_insert((Instant::now(), 0));
                entry.1 = entry.1.saturating_add(1);
                return;
            }
            let entry = failures.entry((client, id.to_owned())).or_insert((Instant::now(), 0));
            if entry.0.elapsed() >= FAILURE_WINDOW {
                *entry = (Instant::now(), 0);
            }
            entry.1 = entry.1.saturating_add(1);
        }
    }

    /// Whether requests must carry a token.
    pub(crate) fn required(&self) -> bool {
        self.required
    }

    /// Check a bearer token sent by `client` (the request's address, see
    /// `trusted_proxies`). A server without tokens (loopback only) takes
    /// every local request, with a token or not: a user who exports
    /// `VRAMSCOPE_TOKEN` for a team's server can still use a local one (a
    /// token it knows still names its holder).
    pub(crate) async fn identify(&self, token: Option<&str>, client: Option<IpAddr>) -> anyhow::Result<Checked> {
        let local = || Identity { name: "local".to_owned(), role: Role::Admin, token_id: None };
        let found = match token {
            Some(token) => self.identify_token(token, client).await?,
            None => Checked::Refused,
        };
        Ok(match found {
            Checked::Holder(identity) => Checked::Holder(identity),
            _ if !self.required => Checked::Holder(local()),
            other => other,
        })
    }

    /// The holder of a bearer token, if it is one.
    async fn identify_token(&self, token: &str, client: Option<IpAddr>) -> anyhow::Result<Checked> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Ok(refused) = self.refused.lock()
            && refused.get(&key).is_some_and(|at| at.elapsed() < REFUSED_FOR)
        {
            return Ok(Checked::Refused);
        }
        let Some((id, secret)) = split_token(token) else { return Ok(Checked::Refused) };
        // Read at every request (one row by its key): a token revoked on any
        // instance, or given another role, is seen at once. Only the
        // argon2 check of the secret is remembered.
        let Some(record) = self.db.get_token(id).await? else {
            if let Ok(mut cache) = self.verified.lock() {
                cache.remove(&key);
            }
            return Ok(Checked::Refused);
        };
        let verified = self.verified.lock().is_ok_and(|cache| {
            cache.get(&key).is_some_and(|(hash, at)| *hash == record.secret_hash && at.elapsed() < VERIFIED_FOR)
        });
        if verified {
            return Ok(holder(record));
        }
        if let Some(wait) = self.limited(client, id) {
            let known = self.known.lock().is_ok_and(|known| known.get(id) == Some(&key));
            if !known {
                return Ok(Checked::Limited(wait));
            }
            return Ok(self.remember(key, record));
        }
        let secret = secret.to_owned();
        let hash = record.secret_hash.clone();
        // argon2 takes tens of milliseconds and 19 MiB: a few at a time, off
        // the async workers.
        let permit = self.hashing.acquire().await.context("hashing slots")?;
        self.hashes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let valid = tokio::task::spawn_blocking(move || verify_secret(&secret, &hash)).await.context("verify")?;
        drop(permit);
        if !valid {
            self.failed(key, client, id);
            return Ok(Checked::Refused);
        }
        if let Ok(mut known) = self.known.lock()
            && (known.len() < REMEMBERED || known.contains_key(id))
        {
            known.insert(id.to_owned(), key);
        }
        Ok(self.remember(key, record))
    }

    /// A verified token's holder; its secret is remembered as verified for
    /// [`VERIFIED_FOR`].
    fn remember(&self, key: [u8; 32], record: TokenRecord) -> Checked {
        if let Ok(mut cache) = self.verified.lock() {
            cache.retain(|_, (_, at)| at.elapsed() < VERIFIED_FOR);
            if cache.len() < REMEMBERED {
                cache.insert(key, (record.secret_hash.clone(), Instant::now()));
            }
        }
        holder(record)
    }
}

/// The holder a token's record names (refused for a role this version does
/// not know).
fn holder(record: TokenRecord) -> Checked {
    let Some(role) = Role::parse(&record.role) else { return Checked::Refused };
    Checked::Holder(Identity { name: record.name, role, token_id: Some(record.id) })
}

/// What a bearer token's check found.
#[derive(Debug)]
pub(crate) enum Checked {
    /// The token's holder (or, without tokens, the local admin).
    Holder(Identity),
    /// No token, or one that does not verify: 401.
    Refused,
    /// This client sent too many wrong secrets for this token id: 429,
    /// to be tried again after this long.
    Limited(Duration),
}

/// How long a signed link works.
pub(crate) const LINK_VALID_MS: i64 = 10 * 60 * 1000;

/// Signs links to a snapshot's file and exports, so that the dashboard can
/// offer them as plain links (a browser navigating to a link sends no
/// `Authorization` header) without putting the token in a URL. A signature
/// covers one path until one time, with a key every instance shares
/// (`Db::shared_secret`).
pub(crate) struct LinkSigner {
    key: Vec<u8>,
}

impl LinkSigner {
    pub(crate) fn new(key: Vec<u8>) -> LinkSigner {
        LinkSigner { key }
    }

    fn mac(&self, path: &str, expires_ms: i64) -> Option<Hmac<Sha256>> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).ok()?;
        mac.update(path.as_bytes());
        mac.update(b"\n");
        mac.update(expires_ms.to_string().as_bytes());
        Some(mac)
    }

    /// `path?expires=…&sig=…`, valid for [`LINK_VALID_MS`].
    pub(crate) fn sign(&self, path: &str) -> String {
        let expires = crate::clock::now_ms() + LINK_VALID_MS;
        let sig = self.mac(path, expires).map(|m| hex::encode(m.finalize().into_bytes())).unwrap_or_default();
        format!("{path}?expires={expires}&sig={sig}")
    }

    /// Whether `sig` signs `path` until `expires_ms`, which has not passed.
    pub(crate) fn verify(&self, path: &str, expires_ms: i64, sig: &str) -> bool {
        let (Ok(sig), Some(mac)) = (hex::decode(sig), self.mac(path, expires_ms)) else { return false };
        expires_ms > crate::clock::now_ms() && mac.verify_slice(&sig).is_ok()
    }
}

fn split_token(token: &str) -> Option<(&str, &str)> {
    let rest = token.strip_prefix("vs_")?;
    let (id, secret) = rest.split_once('_')?;
    (!id.is_empty() && !secret.is_empty()).then_some((id, secret))
}

fn verify_secret(secret: &str, hash: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|parsed| Argon2::default().verify_password(secret.as_bytes(), &parsed).is_ok())
}

/// Make a new token: the record to store and the token to show once.
pub(crate) fn new_token(name: &str, role: Role) -> anyhow::Result<(TokenRecord, String)> {
    let mut rng = rand::rng();
    let mut id = [0u8; 5];
    let mut secret = [0u8; 24];
    rng.fill_bytes(&mut id);
    rng.fill_bytes(&mut secret);
    let (id, secret) = (hex::encode(id), hex::encode(secret));
    let mut salt = [0u8; 16];
    rng.fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|e| anyhow::anyhow!("salt: {e}"))?;
    let hash = Argon2::default()
        .hash_password(secret.as_bytes(), &salt)
        .map_err(|e| anyhow::anyhow!("hashing the token: {e}"))?
        .to_string();
    let token = format!("vs_{id}_{secret}");
    let record = TokenRecord {
        id,
        name: name.to_owned(),
        role: role.as_str().to_owned(),
        secret_hash: hash,
        created_at_ms: crate::clock::now_ms(),
    };
    Ok((record, token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_links_cover_one_path_until_they_expire() {
        let signer = LinkSigner::new(b"key".to_vec());
        let link = signer.sign("/api/v1/snapshots/a/file");
        let query = link.split_once('?').expect("query").1;
        let (expires, sig) = query.split_once("&sig=").expect("sig");
        let expires: i64 = expires.trim_start_matches("expires=").parse().expect("expires");
        assert!(signer.verify("/api/v1/snapshots/a/file", expires, sig));
        assert!(!signer.verify("/api/v1/snapshots/b/file", expires, sig), "another path");
        assert!(!signer.verify("/api/v1/snapshots/a/file", expires + 1, sig), "another expiry");
        assert!(!LinkSigner::new(b"other".to_vec()).verify("/api/v1/snapshots/a/file", expires, sig), "another key");
        let old = signer.mac("/x", 1).expect("mac").finalize().into_bytes();
        assert!(!signer.verify("/x", 1, &hex::encode(old)), "expired");
    }

    #[test]
    fn an_ipv6_client_is_counted_by_its_64_and_a_mapped_one_as_ipv4() {
        let ip = |s: &str| Some(s.parse::<IpAddr>().expect("ip"));
        assert_eq!(counted_as(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(counted_as(ip("2001:db8:1:2:ffff:1:2:3")), counted_as(ip("2001:db8:1:2::9")));
        assert_ne!(counted_as(ip("2001:db8:1:3::1")), counted_as(ip("2001:db8:1:2::1")));
        assert_eq!(counted_as(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(counted_as(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(counted_as(None), None);
    }

    #[test]
    fn tokens_verify_against_their_hash_only() {
        let (record, token) = new_token("ci", Role::Uploader).expect("token");
        let (id, secret) = split_token(&token).expect("shape");
        assert_eq!(id, record.id);
        assert!(verify_secret(secret, &record.secret_hash));
        assert!(!verify_secret("not-the-secret", &record.secret_hash));
        assert!(!record.secret_hash.contains(secret), "only the hash is stored");
        assert!(Role::Admin > Role::Uploader && Role::Uploader > Role::Viewer);
    }
}
