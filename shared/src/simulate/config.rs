//! The allocator's settings: `PYTORCH_CUDA_ALLOC_CONF` parsed the way
//! `c10/core/AllocatorConfig.cpp` parses it, or taken from a snapshot's
//! `allocator_settings`; and byte sizes written with units (`80GiB`).
//!
//! Written by hand: the format is PyTorch's own (`k:v,k:[a:b,>:c]`) and no
//! crate parses it.

use thiserror::Error;

use crate::snapshot::AllocatorSettings;

const MIB: u64 = 1 << 20;

/// Number of power-of-two size intervals `roundup_power2_divisions` covers:
/// 1 MiB, 2 MiB, … 32 GiB (and everything above).
pub const ROUNDUP_INTERVALS: usize = 16;

/// The smallest value PyTorch accepts for `max_split_size_mb` and
/// `max_non_split_rounding_mb` (`kLargeBuffer` in MiB).
const MIN_SPLIT_MB: u64 = 20;

/// Why an allocator setting or a size could not be understood.
#[derive(Debug, Error, PartialEq)]
pub enum ConfigError {
    /// A key PyTorch does not know.
    #[error("alloc-conf {conf:?}: unknown option {key:?} (known: {known})")]
    UnknownKey {
        /// The whole setting string.
        conf: String,
        /// The key as written.
        key: String,
        /// The keys that are understood.
        known: &'static str,
    },
    /// The string does not follow `key:value,key:value`.
    #[error("alloc-conf {conf:?}: expected {expected} {place}, found {found}")]
    Syntax {
        /// The whole setting string.
        conf: String,
        /// What should have come.
        expected: &'static str,
        /// Where (e.g. "after \"max_split_size_mb\"").
        place: String,
        /// What came instead.
        found: String,
    },
    /// A value of the wrong form or out of range.
    #[error("alloc-conf {conf:?}: {key} = {value:?}: {reason}")]
    BadValue {
        /// The whole setting string.
        conf: String,
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A valid PyTorch option this simulator cannot model.
    #[error("alloc-conf {conf:?}: {key}: {reason}")]
    Unsupported {
        /// The whole setting string.
        conf: String,
        /// The key.
        key: String,
        /// Why, and what to do instead.
        reason: &'static str,
    },
    /// A byte size that could not be parsed.
    #[error("size {text:?}: {reason}")]
    BadSize {
        /// The text as given.
        text: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// The settings of PyTorch's native caching allocator that change where
/// blocks go. Defaults are PyTorch's.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocatorConfig {
    /// Blocks of this size or larger are never split (`max_split_size_mb`);
    /// `u64::MAX` means unlimited.
    pub max_split_size: u64,
    /// An oversize block may serve a request up to this much smaller than
    /// itself (`max_non_split_rounding_mb`, default 20 MiB).
    pub max_non_split_rounding: u64,
    /// Divisions per power-of-two interval, from the interval starting at
    /// 1 MiB (index 0) to the one starting at 32 GiB (index 15); 0 or 1 means
    /// plain 512-byte rounding.
    pub roundup_power2_divisions: [u64; ROUNDUP_INTERVALS],
    /// `garbage_collection_threshold` (0 = off). Acts only under a memory
    /// capacity, as in PyTorch, where it needs a memory fraction.
    pub garbage_collection_threshold: f64,
    /// `expandable_segments`.
    pub expandable_segments: bool,
    /// The segment a large-pool request under 10 MiB gets when no cached
    /// block fits (`large_segment_size_mb`, default 20 MiB; PyTorch 2.11
    /// accepts it, checked on an H200).
    pub large_segment_size: u64,
    /// `per_process_memory_fraction` (PyTorch 2.11 accepts it, checked on
    /// an H200): the allocator may reserve at most this fraction of the
    /// device's total memory as CUDA reports it
    /// (`torch.cuda.get_device_properties(d).total_memory`). A capacity once
    /// that total is known ([`Self::capacity_for`]).
    pub memory_fraction: Option<f64>,
    /// Options of the setting string accepted but not modelled, as written
    /// (`key:value`): a recorded string's unknown keys land here instead of
    /// being dropped, and every output names them.
    pub not_modelled: Vec<String>,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            max_split_size: u64::MAX,
            max_non_split_rounding: 20 * MIB,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            large_segment_size: 20 * MIB,
            memory_fraction: None,
            not_modelled: Vec::new(),
        }
    }
}

/// Every key PyTorch 2.11 accepts (probed on an H200 by
/// `tests/gpu/alloc_keys_probe.py`); see docs/allocator-settings.md for
/// which change placement.
const KNOWN_KEYS: &str = "max_split_size_mb, max_non_split_rounding_mb, large_segment_size_mb, roundup_power2_divisions, \
                          garbage_collection_threshold, expandable_segments, per_process_memory_fraction, backend, \
                          release_lock_on_cudamalloc, pinned_use_cuda_host_register, pinned_num_register_threads, \
                          pinned_use_background_threads, pinned_reserve_segment_size_mb, \
                          graph_capture_record_stream_reuse";

/// A token of the setting string: a word, or one of `, : [ ]`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Token<'a> {
    Word(&'a str),
    Punct(char),
}

impl Token<'_> {
    fn describe(self) -> String {
        match self {
            Token::Word(w) => format!("{w:?}"),
            Token::Punct(c) => format!("'{c}'"),
        }
    }
}

/// Split like PyTorch's `lexArgs`: `, : [ ]` are tokens of their own,
/// everything else forms words. The caller has dropped the spaces, as
/// PyTorch does.
fn lex(conf: &str) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    let mut start: Option<usize> = None;
    for (i, c) in conf.char_indices() {
        if matches!(c, ',' | ':' | '[' | ']') {
            if let Some(s) = start.take() {
                tokens.push(Token::Word(&conf[s..i]));
            }
            tokens.push(Token::Punct(c));
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        tokens.push(Token::Word(&conf[s..]));
    }
    tokens
}

/// A cursor over the tokens that produces errors naming the setting string.
struct Parser<'a> {
    conf: &'a str,
    tokens: Vec<Token<'a>>,
    at: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<Token<'a>> {
        self.tokens.get(self.at).copied()
    }

    fn found(&self) -> String {
        self.peek().map_or_else(|| "the end".to_owned(), Token::describe)
    }

    fn syntax(&self, expected: &'static str, place: String) -> ConfigError {
        ConfigError::Syntax { conf: self.conf.to_owned(), expected, place, found: self.found() }
    }

    fn punct(&mut self, c: char, expected: &'static str, place: impl Fn() -> String) -> Result<(), ConfigError> {
        if self.peek() == Some(Token::Punct(c)) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.syntax(expected, place()))
        }
    }

    fn word(&mut self, expected: &'static str, place: impl Fn() -> String) -> Result<&'a str, ConfigError> {
        match self.peek() {
            Some(Token::Word(w)) => {
                self.at += 1;
                Ok(w)
            }
            _ => Err(self.syntax(expected, place())),
        }
    }

    fn bad(&self, key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError::BadValue {
            conf: self.conf.to_owned(),
            key: key.to_owned(),
            value: value.to_owned(),
            reason: reason.into(),
        }
    }

    fn integer(&self, key: &str, value: &str) -> Result<u64, ConfigError> {
        value.parse::<u64>().map_err(|_| self.bad(key, value, "expected a whole number"))
    }

    fn boolean(&self, key: &str, value: &str) -> Result<bool, ConfigError> {
        match value {
            "True" => Ok(true),
            "False" => Ok(false),
            _ => Err(self.bad(key, value, "expected True or False")),
        }
    }

    fn megabytes_at_least_20(&self, key: &str, value: &str) -> Result<u64, ConfigError> {
        let mb = self.integer(key, value)?;
        if mb < MIN_SPLIT_MB {
            return Err(self.bad(key, value, format!("must be at least {MIN_SPLIT_MB} (MiB)")));
        }
        Ok(mb.min(u64::MAX / MIB) * MIB)
    }
}

impl AllocatorConfig {
    /// Parse a `PYTORCH_CUDA_ALLOC_CONF` string, starting from PyTorch's
    /// defaults. Accepts what PyTorch accepts (including options that do not
    /// change placement, which are ignored) and refuses unknown keys.
    pub fn parse(conf: &str) -> Result<AllocatorConfig, ConfigError> {
        AllocatorConfig::parse_with(conf, false)
    }

    /// Parse a setting string a snapshot recorded: PyTorch ran with it, so
    /// an option this model does not know (or cannot model) does not make
    /// the whole string unusable; it goes to [`Self::not_modelled`], and the
    /// rest is modelled.
    pub fn parse_recorded(conf: &str) -> Result<AllocatorConfig, ConfigError> {
        AllocatorConfig::parse_with(conf, true)
    }

    fn parse_with(conf: &str, lenient: bool) -> Result<AllocatorConfig, ConfigError> {
        let mut config = AllocatorConfig::default();
        let compact: String = conf.chars().filter(|c| !c.is_whitespace()).collect();
        let mut p = Parser { conf, tokens: lex(&compact), at: 0 };
        while p.peek().is_some() {
            let key = p.word("an option name", || "at the start of an option".to_owned())?;
            p.punct(':', "':'", || format!("after {key:?}"))?;
            if key == "roundup_power2_divisions" {
                config.roundup_power2_divisions = parse_divisions(&mut p)?;
            } else {
                let value = p.word("a value", || format!("after \"{key}:\""))?;
                match config.apply(&p, key, value) {
                    Ok(()) => {}
                    Err(_) if lenient => config.not_modelled.push(format!("{key}:{value}")),
                    Err(e) => return Err(e),
                }
            }
            match p.peek() {
                None => break,
                Some(Token::Punct(',')) => p.at += 1,
                Some(_) => return Err(p.syntax("','", format!("after the value of {key:?}"))),
            }
        }
        Ok(config)
    }

    fn apply(&mut self, p: &Parser<'_>, key: &str, value: &str) -> Result<(), ConfigError> {
        match key {
            "max_split_size_mb" => self.max_split_size = p.megabytes_at_least_20(key, value)?,
            "max_non_split_rounding_mb" => self.max_non_split_rounding = p.megabytes_at_least_20(key, value)?,
            "garbage_collection_threshold" => {
                let t: f64 = value.parse().map_err(|_| p.bad(key, value, "expected a number"))?;
                if !(t > 0.0 && t < 1.0) {
                    return Err(p.bad(key, value, "must lie strictly between 0 and 1"));
                }
                self.garbage_collection_threshold = t;
            }
            "expandable_segments" => self.expandable_segments = p.boolean(key, value)?,
            "large_segment_size_mb" => {
                let mb = p.integer(key, value)?;
                if mb == 0 {
                    return Err(p.bad(key, value, "must be at least 1"));
                }
                self.large_segment_size = mb.min(u64::MAX / MIB) * MIB;
            }
            "backend" => match value {
                "native" => {}
                "cudaMallocAsync" => {
                    return Err(ConfigError::Unsupported {
                        conf: p.conf.to_owned(),
                        key: key.to_owned(),
                        reason: "cudaMallocAsync is CUDA's own pool allocator; only the native caching allocator \
                                 can be simulated",
                    });
                }
                _ => return Err(p.bad(key, value, "expected native or cudaMallocAsync")),
            },
            // Options that change locking or pinned host memory, not where
            // device blocks go: accepted, as PyTorch accepts them, and ignored.
            "release_lock_on_cudamalloc"
            | "pinned_use_cuda_host_register"
            | "pinned_use_background_threads"
            | "graph_capture_record_stream_reuse" => {
                p.boolean(key, value)?;
            }
            "pinned_num_register_threads" => {
                p.integer(key, value)?;
            }
            "pinned_reserve_segment_size_mb" => {
                p.integer(key, value)?;
            }
            "per_process_memory_fraction" => {
                let fraction: f64 = value.parse().map_err(|_| p.bad(key, value, "expected a number"))?;
                if !(fraction > 0.0 && fraction <= 1.0) {
                    return Err(p.bad(key, value, "expected a fraction above 0 and at most 1"));
                }
                self.memory_fraction = Some(fraction);
            }
            _ => {
                return Err(ConfigError::UnknownKey {
                    conf: p.conf.to_owned(),
                    key: key.to_owned(),
                    known: KNOWN_KEYS,
                });
            }
        }
        Ok(())
    }

    /// The settings a snapshot recorded (`allocator_settings`, PyTorch 2.3+).
    /// Typed fields win; `max_non_split_rounding_mb`, which is not recorded
    /// as a field, comes from the recorded `PYTORCH_CUDA_ALLOC_CONF` string.
    pub fn from_recorded(settings: &AllocatorSettings) -> AllocatorConfig {
        let mut config = match settings.alloc_conf.as_deref().map(AllocatorConfig::parse_recorded) {
            Some(Ok(config)) => config,
            // Not even the syntax: nothing of it can be modelled, and it says so.
            Some(Err(_)) => AllocatorConfig {
                not_modelled: vec![settings.alloc_conf.clone().unwrap_or_default()],
                ..AllocatorConfig::default()
            },
            None => AllocatorConfig::default(),
        };
        config.max_split_size = settings.max_split_size.unwrap_or(u64::MAX);
        config.expandable_segments = settings.expandable_segments;
        config.garbage_collection_threshold = settings.garbage_collection_threshold.max(0.0);
        if !settings.roundup_power2_divisions.is_empty() {
            let mut table = [0; ROUNDUP_INTERVALS];
            for &(mib, divisions) in &settings.roundup_power2_divisions {
                table[interval_index_mib(mib)] = divisions;
            }
            config.roundup_power2_divisions = table;
        }
        config
    }

    /// The settings in PyTorch's syntax, non-default keys only (`""` for the
    /// defaults).
    pub fn to_conf_string(&self) -> String {
        let mut parts = Vec::new();
        let defaults = AllocatorConfig::default();
        if self.max_split_size != defaults.max_split_size {
            parts.push(format!("max_split_size_mb:{}", self.max_split_size / MIB));
        }
        if self.max_non_split_rounding != defaults.max_non_split_rounding {
            parts.push(format!("max_non_split_rounding_mb:{}", self.max_non_split_rounding / MIB));
        }
        let d = &self.roundup_power2_divisions;
        if d.iter().any(|&n| n != 0) {
            if d.iter().all(|&n| n == d[0]) {
                parts.push(format!("roundup_power2_divisions:{}", d[0]));
            } else {
                let items: Vec<String> = d.iter().enumerate().map(|(i, n)| format!("{}:{n}", 1u64 << i)).collect();
                parts.push(format!("roundup_power2_divisions:[{}]", items.join(",")));
            }
        }
        if self.garbage_collection_threshold > 0.0 {
            parts.push(format!("garbage_collection_threshold:{}", self.garbage_collection_threshold));
        }
        if self.expandable_segments {
            parts.push("expandable_segments:True".to_owned());
        }
        if self.large_segment_size != defaults.large_segment_size {
            parts.push(format!("large_segment_size_mb:{}", self.large_segment_size / MIB));
        }
        if let Some(f) = self.memory_fraction {
            parts.push(format!("per_process_memory_fraction:{f}"));
        }
        parts.join(",")
    }

    /// The memory a device may reserve under `per_process_memory_fraction`,
    /// given the device's total as CUDA reports it: PyTorch's
    /// `static_cast<size_t>(fraction * total)`. `None` without a fraction
    /// or a total.
    pub fn capacity_for(&self, cuda_total_bytes: Option<u64>) -> Option<u64> {
        Some((self.memory_fraction? * cuda_total_bytes? as f64) as u64)
    }

    /// Divisions that apply to a (rounded-to-512) request of `size` bytes.
    pub fn divisions_for(&self, size: u64) -> u64 {
        let log2 = 63 - u64::from(size.max(1).leading_zeros());
        let index = log2.saturating_sub(20).min(ROUNDUP_INTERVALS as u64 - 1);
        self.roundup_power2_divisions[index as usize]
    }
}

/// The interval index of a power-of-two MiB value (1 → 0, 64 → 6), clamped.
fn interval_index_mib(mib: u64) -> usize {
    let log2 = 63 - u64::from(mib.max(1).leading_zeros());
    (log2 as usize).min(ROUNDUP_INTERVALS - 1)
}

/// `roundup_power2_divisions:N` or `roundup_power2_divisions:[64:8,256:4,>:1]`,
/// with PyTorch's semantics (checked against its `AllocatorConfigTest`): the
/// first listed interval's value also covers every smaller interval; listed
/// intervals set their own entry; `>` fills every interval after the last
/// listed one; intervals between listed ones keep 0.
fn parse_divisions(p: &mut Parser<'_>) -> Result<[u64; ROUNDUP_INTERVALS], ConfigError> {
    const KEY: &str = "roundup_power2_divisions";
    let mut table = [0; ROUNDUP_INTERVALS];
    if p.peek() != Some(Token::Punct('[')) {
        let value = p.word("a number or '['", || format!("after \"{KEY}:\""))?;
        let n = p.integer(KEY, value)?;
        if !n.is_power_of_two() {
            return Err(p.bad(KEY, value, "the number of divisions must be a power of two"));
        }
        return Ok([n; ROUNDUP_INTERVALS]);
    }
    p.at += 1;
    let mut last_index: Option<usize> = None;
    loop {
        let interval = p.word("an interval in MiB or '>'", || format!("inside \"{KEY}:[\""))?;
        p.punct(':', "':'", || format!("after the interval {interval:?} of {KEY}"))?;
        let value = p.word("a number of divisions", || format!("after \"{interval}:\" in {KEY}"))?;
        let n = p.integer(KEY, value)?;
        if n != 0 && !n.is_power_of_two() {
            return Err(p.bad(KEY, value, "the number of divisions must be a power of two (or 0)"));
        }
        if interval == ">" {
            let from = last_index.map_or(0, |i| i + 1);
            for slot in table.iter_mut().skip(from) {
                *slot = n;
            }
        } else {
            let mib = p.integer(KEY, interval)?;
            if !mib.is_power_of_two() {
                return Err(p.bad(KEY, interval, "intervals must be powers of two (in MiB)"));
            }
            let index = interval_index_mib(mib);
            if last_index.is_none() {
                for slot in table.iter_mut().take(index) {
                    *slot = n;
                }
            }
            table[index] = n;
            last_index = Some(index);
        }
        match p.peek() {
            Some(Token::Punct(',')) => p.at += 1,
            Some(Token::Punct(']')) => {
                p.at += 1;
                return Ok(table);
            }
            _ => return Err(p.syntax("',' or ']'", format!("inside \"{KEY}:[\""))),
        }
    }
}

/// Parse a byte size: a number with an optional unit: `B`, decimal
/// `KB MB GB TB` or binary `KiB MiB GiB TiB` (case does not matter), e.g.
/// `80GiB`, `500MB`, `2.5 GiB`, `3002197606`.
pub fn parse_size(text: &str) -> Result<u64, ConfigError> {
    let bad = |reason| ConfigError::BadSize { text: text.to_owned(), reason };
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    if number.is_empty() {
        return Err(bad("expected a number, e.g. 80GiB or 500MB"));
    }
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        "k" | "m" | "g" | "t" => {
            return Err(bad("ambiguous unit: write KB/MB/GB/TB (powers of 1000) or KiB/MiB/GiB/TiB"));
        }
        _ => return Err(bad("unknown unit: use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB")),
    };
    if let Ok(whole) = number.parse::<u64>() {
        return whole.checked_mul(multiplier).ok_or_else(|| bad("too large"));
    }
    let value: f64 = number.parse().map_err(|_| bad("expected a number, e.g. 80GiB or 500MB"))?;
    let bytes = (value * multiplier as f64).round();
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(bad("too large"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_segment_size_is_parsed_and_written_back() {
        let c = AllocatorConfig::parse("large_segment_size_mb:64").expect("parses");
        assert_eq!(c.large_segment_size, 64 * MIB);
        assert_eq!(c.to_conf_string(), "large_segment_size_mb:64");
        assert!(AllocatorConfig::parse("large_segment_size_mb:0").is_err());
    }

    /// Regression: one option the model did not know made a recorded
    /// string unusable, and the replay silently ran with the defaults.
    #[test]
    fn regression_a_recorded_option_that_is_not_modelled_is_named_not_dropped() {
        let recorded = "max_split_size_mb:256,some_future_option:7,per_process_memory_fraction:0.5";
        assert!(AllocatorConfig::parse(recorded).is_err(), "given by a user, an unknown key is refused");
        let c = AllocatorConfig::parse_recorded(recorded).expect("recorded: parsed leniently");
        assert_eq!(c.max_split_size, 256 * MIB, "the rest is modelled");
        assert_eq!(c.not_modelled, ["some_future_option:7"]);
        assert_eq!(c.memory_fraction, Some(0.5));
        assert_eq!(c.capacity_for(Some(150_109_880_320)), Some(75_054_940_160));
        assert_eq!(c.capacity_for(None), None);
    }

    #[test]
    fn defaults_are_pytorchs() {
        let c = AllocatorConfig::parse("").expect("valid settings");
        assert_eq!(c, AllocatorConfig::default());
        assert_eq!(c.max_non_split_rounding, 20 * MIB);
        assert_eq!(c.to_conf_string(), "");
    }

    #[test]
    fn parses_every_modelled_key() {
        let c = AllocatorConfig::parse(
            "max_split_size_mb:40, max_non_split_rounding_mb:30,garbage_collection_threshold:0.5,\
             roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1],expandable_segments:True,\
             pinned_use_background_threads:True",
        )
        .expect("valid settings");
        assert_eq!(c.max_split_size, 40 * MIB);
        assert_eq!(c.max_non_split_rounding, 30 * MIB);
        assert_eq!(c.garbage_collection_threshold, 0.5);
        assert!(c.expandable_segments);
        // PyTorch's AllocatorConfigTest expectations.
        let d = |mib: u64| c.divisions_for(mib * MIB);
        assert_eq!((d(32), d(64), d(128), d(256), d(512), d(1024)), (8, 8, 2, 4, 2, 4));
        assert_eq!((d(2048), d(4096), d(8192)), (1, 1, 1));
    }

    #[test]
    fn divisions_list_semantics_match_pytorch() {
        let c =
            AllocatorConfig::parse("roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]").expect("valid settings");
        let d = |mib: u64| c.divisions_for(mib * MIB);
        assert_eq!((d(64), d(128), d(256), d(512), d(1024), d(2048), d(4096)), (8, 8, 16, 1, 0, 8, 2));
        let c = AllocatorConfig::parse("roundup_power2_divisions:4").expect("valid settings");
        assert!(c.roundup_power2_divisions.iter().all(|&n| n == 4));
        assert_eq!(c.to_conf_string(), "roundup_power2_divisions:4");
        // Sizes under 1 MiB use the first interval.
        assert_eq!(c.divisions_for(4096), 4);
    }

    #[test]
    fn trailing_comma_and_spaces_are_accepted() {
        let c = AllocatorConfig::parse(" expandable_segments : False , ").expect("valid settings");
        assert!(!c.expandable_segments);
    }

    #[test]
    fn bad_input_gets_a_clear_error() {
        let err = |s: &str| AllocatorConfig::parse(s).expect_err("invalid input").to_string();
        assert!(err("max_split_size_mb:10").contains("must be at least 20"), "{}", err("max_split_size_mb:10"));
        assert!(err("max_split_size_mb:abc").contains("whole number"));
        assert!(err("max_split_size_mb").contains("expected ':' after \"max_split_size_mb\""));
        assert!(err("max_split_size_mb:").contains("found the end"));
        assert!(err("foo:1").contains("unknown option \"foo\""));
        assert!(err("expandable_segments:yes").contains("True or False"));
        assert!(err("garbage_collection_threshold:1.5").contains("between 0 and 1"));
        assert!(err("roundup_power2_divisions:3").contains("power of two"));
        assert!(err("roundup_power2_divisions:[64:8").contains("',' or ']'"));
        assert!(err("roundup_power2_divisions:[100:8]").contains("powers of two"));
        assert!(err("backend:cudaMallocAsync").contains("only the native"));
        assert!(err("expandable_segments:True max_split_size_mb:64").contains("expected"));
    }

    #[test]
    fn recorded_settings_are_taken_as_typed() {
        let s = AllocatorSettings {
            alloc_conf: Some("max_non_split_rounding_mb:64".to_owned()),
            max_split_size: Some(512 * MIB),
            expandable_segments: true,
            garbage_collection_threshold: 0.0,
            roundup_power2_divisions: vec![(1, 0), (2, 0), (4, 4), (32768, 2)],
            raw: Vec::new(),
        };
        let c = AllocatorConfig::from_recorded(&s);
        assert_eq!(c.max_split_size, 512 * MIB);
        assert_eq!(c.max_non_split_rounding, 64 * MIB);
        assert!(c.expandable_segments);
        assert_eq!(c.roundup_power2_divisions[2], 4);
        assert_eq!(c.roundup_power2_divisions[15], 2);
    }

    #[test]
    fn sizes_with_units() {
        assert_eq!(parse_size("80GiB").expect("valid size"), 80 << 30);
        assert_eq!(parse_size("500MB").expect("valid size"), 500_000_000);
        assert_eq!(parse_size("2.5 GiB").expect("valid size"), 5 << 29);
        assert_eq!(parse_size("3002197606").expect("valid size"), 3002197606);
        assert_eq!(parse_size("1kib").expect("valid size"), 1024);
        assert!(parse_size("80G").expect_err("invalid input").to_string().contains("ambiguous"));
        assert!(parse_size("GiB").is_err());
        assert!(parse_size("12 parsecs").expect_err("invalid input").to_string().contains("unknown unit"));
        assert!(parse_size("99999999999TiB").expect_err("invalid input").to_string().contains("too large"));
    }
}
