//! The labels an upload carries (name, job, host, rank, tags, trigger) and
//! their limits, checked before anything is stored.

use serde::Deserialize;

/// Longest name, job or host accepted, in bytes.
const MAX_LABEL_BYTES: usize = 256;
/// Most tags on one snapshot, and the longest tag.
const MAX_TAGS: usize = 32;
const MAX_TAG_BYTES: usize = 64;

/// Metadata of an upload, from the query string or multipart form fields.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Labels {
    /// Display name (default: the file's name, else `snapshot-{id}`).
    pub(crate) name: Option<String>,
    /// The training job.
    pub(crate) job: Option<String>,
    /// The host.
    pub(crate) host: Option<String>,
    /// The distributed rank.
    pub(crate) rank: Option<i64>,
    /// Comma-separated.
    pub(crate) tags: Option<String>,
    /// `manual` (default), `threshold` or `oom`.
    pub(crate) trigger: Option<String>,
}

/// A label past its limits: what to say to the client.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadLabel(pub(crate) String);

/// Split, trim and deduplicate tags.
pub(crate) fn clean_tags<'a>(tags: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in tags.map(str::trim).filter(|t| !t.is_empty()) {
        if !out.iter().any(|o| o == t) {
            out.push(t.to_owned());
        }
    }
    out
}

/// Refuse labels and tags past their limits.
pub(crate) fn check_labels(labels: &Labels) -> Result<(), BadLabel> {
    for (what, value) in [("name", &labels.name), ("job", &labels.job), ("host", &labels.host)] {
        if let Some(v) = value {
            check_label(what, v)?;
        }
    }
    let tags = clean_tags(labels.tags.as_deref().unwrap_or_default().split(','));
    check_tags(&tags)
}

/// Refuse more than [`MAX_TAGS`] tags or one longer than [`MAX_TAG_BYTES`].
pub(crate) fn check_tags(tags: &[String]) -> Result<(), BadLabel> {
    if tags.len() > MAX_TAGS {
        return Err(BadLabel(format!("tags: {} of them, more than {MAX_TAGS}", tags.len())));
    }
    if let Some(t) = tags.iter().find(|t| t.len() > MAX_TAG_BYTES) {
        let start: String = t.chars().take(16).collect();
        return Err(BadLabel(format!("tags: {start:?}… is longer than {MAX_TAG_BYTES} bytes")));
    }
    Ok(())
}

/// Refuse a label (name, job, host) past [`MAX_LABEL_BYTES`]; renames
/// check the name with it too.
pub(crate) fn check_label(what: &str, value: &str) -> Result<(), BadLabel> {
    if value.len() > MAX_LABEL_BYTES {
        return Err(BadLabel(format!("{what}: {} bytes, more than {MAX_LABEL_BYTES}", value.len())));
    }
    Ok(())
}
