//! "Will it fit?" on a job's page: the form (each snapshot of the job with
//! its size, the knob's name, the capacity, the search's step), the queries
//! it sends to `GET /api/v1/predict`, and the answers merged into what the
//! chart and the table show. Pure, so tested natively; the component
//! (`pages/predict.rs`) only binds it to inputs.
//!
//! Two queries make one answer: the search for the largest size that fits
//! says which sizes it tried and whether each fits, but gives peaks only
//! for the largest and the first failure; a second query asks for the
//! peaks of the sizes tried (at most [`MAX_AT`]), so the chart draws a
//! curve through every size searched.

use vramscope_shared::api::predict::{MAX_AT, MAX_RUNS, PredictQuery};
use vramscope_shared::api::snapshots::SnapshotMeta;
use vramscope_shared::predict::{PredictReport, SizePrediction};

/// The knob's name when no tag names one.
pub const DEFAULT_KEY: &str = "size";

/// `KEY=INTEGER` tags (`batch=8`, `seq=2048`): the sizes a snapshot says
/// it was recorded at, by knob.
pub fn size_tags(tags: &[String]) -> Vec<(String, u64)> {
    tags.iter()
        .filter_map(|t| {
            let (key, value) = t.split_once('=')?;
            let (key, value) = (key.trim(), value.trim());
            let ok = !key.is_empty() && key.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-');
            let n = value.parse::<u64>().ok().filter(|&n| n > 0)?;
            ok.then(|| (key.to_owned(), n))
        })
        .collect()
}

/// One snapshot of the job in the form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRow {
    /// Its id.
    pub id: String,
    /// Its name, for people.
    pub name: String,
    /// Its `KEY=INTEGER` tags.
    pub sizes: Vec<(String, u64)>,
    /// The size box's text (blank: not used).
    pub size: String,
}

/// The form's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PredictForm {
    /// The job's snapshots, in the list's order.
    pub rows: Vec<RunRow>,
    /// Knobs named by the snapshots' tags, most used first.
    pub keys: Vec<String>,
    /// The knob chosen.
    pub key: String,
    /// The capacity box (`4GiB`).
    pub capacity: String,
    /// The step box (blank: 1, every integer size).
    pub step: String,
}

impl PredictForm {
    /// The form for a job's snapshots, sizes filled from the most used knob.
    pub fn new(snapshots: &[SnapshotMeta]) -> PredictForm {
        let rows: Vec<RunRow> = snapshots
            .iter()
            .map(|s| RunRow { id: s.id.clone(), name: s.name.clone(), sizes: size_tags(&s.tags), size: String::new() })
            .collect();
        let mut keys: Vec<(String, usize)> = Vec::new();
        for (k, _) in rows.iter().flat_map(|r| &r.sizes) {
            match keys.iter_mut().find(|(key, _)| key == k) {
                Some((_, n)) => *n += 1,
                None => keys.push((k.clone(), 1)),
            }
        }
        // Most used first; ties in the order met.
        keys.sort_by_key(|k| std::cmp::Reverse(k.1));
        let keys: Vec<String> = keys.into_iter().map(|(k, _)| k).collect();
        let mut form = PredictForm { rows, keys, key: String::new(), capacity: String::new(), step: String::new() };
        let first = form.keys.first().cloned().unwrap_or_else(|| DEFAULT_KEY.to_owned());
        form.choose_key(&first);
        form
    }

    /// Choose the knob, refilling every size box from the snapshots' tags.
    pub fn choose_key(&mut self, key: &str) {
        key.clone_into(&mut self.key);
        for row in &mut self.rows {
            row.size = row.sizes.iter().find(|(k, _)| k == key).map(|(_, n)| n.to_string()).unwrap_or_default();
        }
    }

    /// Set a row's size box.
    pub fn set_size(&mut self, id: &str, text: &str) {
        if let Some(row) = self.rows.iter_mut().find(|r| r.id == id) {
            text.trim().clone_into(&mut row.size);
        }
    }

    /// The search's query: every row with a size, the largest size that
    /// fits under the capacity. A sentence for the page when the form is
    /// not ready (the server checks the rest and says what is wrong).
    pub fn search_query(&self) -> Result<PredictQuery, String> {
        let runs: Vec<String> =
            self.rows.iter().filter(|r| !r.size.is_empty()).map(|r| format!("{}:{}", r.id, r.size)).collect();
        if runs.is_empty() {
            return Err(format!("Give the size ({}) of at least one snapshot.", self.key));
        }
        if runs.len() > MAX_RUNS {
            return Err(format!("At most {MAX_RUNS} snapshots: clear the size of the others."));
        }
        let step = match self.step.trim() {
            "" => None,
            s => Some(s.parse::<u64>().map_err(|_| format!("The step is a positive integer, not {s:?}."))?),
        };
        let capacity = Some(self.capacity.trim()).filter(|c| !c.is_empty()).map(str::to_owned);
        Ok(PredictQuery { runs: runs.join(","), largest: Some(true), capacity, step, ..PredictQuery::default() })
    }
}

/// The second query: the peaks of the sizes the search tried that it gave
/// none for (at most [`MAX_AT`], spread over them); `None` when every
/// size searched already has its peak.
pub fn curve_query(search: &PredictQuery, report: &PredictReport) -> Option<PredictQuery> {
    let known: Vec<u64> = report.predictions.iter().map(|p| p.size).collect();
    let missing: Vec<u64> = report.searched.iter().map(|&(s, _)| s).filter(|s| !known.contains(s)).collect();
    if missing.is_empty() {
        return None;
    }
    let picked: Vec<u64> = if missing.len() <= MAX_AT {
        missing
    } else {
        (0..MAX_AT).map(|k| missing[k * (missing.len() - 1) / (MAX_AT - 1)]).collect()
    };
    let at: Vec<String> = picked.iter().map(u64::to_string).collect();
    Some(PredictQuery { at: Some(at.join(",")), largest: None, step: None, ..search.clone() })
}

/// What the chart and the table show: the search's answer, and every
/// prediction with a peak (the search's and the curve's), by size.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The search's answer.
    pub report: PredictReport,
    /// Every size with a predicted peak, ascending, each once.
    pub points: Vec<SizePrediction>,
    /// The knob's name.
    pub key: String,
}

impl Outcome {
    /// The search's answer with the curve's predictions merged in.
    pub fn new(report: PredictReport, curve: Option<PredictReport>, key: &str) -> Outcome {
        let mut points: Vec<SizePrediction> = report.predictions.clone();
        points.extend(curve.into_iter().flat_map(|c| c.predictions));
        points.sort_by_key(|p| p.size);
        points.dedup_by_key(|p| p.size);
        Outcome { report, points, key: key.to_owned() }
    }

    /// The sentence above the chart.
    pub fn verdict(&self) -> String {
        let r = &self.report;
        let capacity = r.capacity_bytes.map_or_else(|| "no capacity".to_owned(), super::format::bytes);
        match (r.largest_fitting_size, r.step) {
            (Some(n), _) => format!("Largest {} that fits in {capacity}: {n}.", self.key),
            (None, Some(_)) => format!("Even the smallest {} runs out of {capacity}.", self.key),
            (None, None) => "No search was made.".to_owned(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use vramscope_shared::api::{SnapshotStatus, Trigger};

    use super::*;

    pub(crate) fn meta(id: &str, tags: &[&str]) -> SnapshotMeta {
        SnapshotMeta {
            id: id.to_owned(),
            sha256: String::new(),
            name: format!("{id}.pickle"),
            job: Some("j".to_owned()),
            host: None,
            rank: None,
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            trigger: Trigger::Manual,
            size_bytes: 1,
            uploaded_at_ms: 0,
            status: SnapshotStatus::Ready,
            error: None,
            pinned: false,
            parsed_bytes: None,
        }
    }

    pub(crate) fn prediction(size: u64, reserved: u64, oom: bool) -> SizePrediction {
        SizePrediction {
            size,
            device: 0,
            reserved_peak_bytes: reserved,
            allocated_peak_bytes: reserved,
            requested_peak_bytes: reserved,
            oom,
            oom_row: None,
            cause: None,
            oom_requested_bytes: None,
            oom_stack: Vec::new(),
            alloc_retries: 0,
            survived_ooms: 0,
        }
    }

    pub(crate) fn report(predictions: Vec<SizePrediction>, searched: Vec<(u64, bool)>) -> PredictReport {
        PredictReport {
            predictions,
            largest_fitting_size: None,
            matched_fraction: 1.0,
            fit: "linear".into(),
            notes: Vec::new(),
            device: 0,
            capacity_bytes: Some(4 << 30),
            capacity_source: Some("given".into()),
            alloc_conf: String::new(),
            confidence: "high".into(),
            runs: Vec::new(),
            unmatched: Vec::new(),
            step: Some(2),
            searched,
            non_monotonic: Vec::new(),
            fit_degrees: vec![0, 1],
        }
    }

    #[test]
    fn sizes_come_from_key_equals_integer_tags_and_the_most_used_key_is_chosen() {
        let tags = ["batch=8".to_owned(), "seq=2048".to_owned(), "v=x".to_owned(), "=3".to_owned(), "n=0".to_owned()];
        assert_eq!(size_tags(&tags), vec![("batch".to_owned(), 8), ("seq".to_owned(), 2048)]);
        let form = PredictForm::new(&[meta("a", &["seq=512", "batch=4"]), meta("b", &["batch=8"]), meta("c", &[])]);
        assert_eq!(form.keys, vec!["batch".to_owned(), "seq".to_owned()]);
        assert_eq!(form.key, "batch");
        let sizes: Vec<&str> = form.rows.iter().map(|r| r.size.as_str()).collect();
        assert_eq!(sizes, vec!["4", "8", ""]);
        let mut form = form;
        form.choose_key("seq");
        assert_eq!(form.rows[0].size, "512");
        assert_eq!(form.rows[1].size, "");
        assert_eq!(PredictForm::new(&[meta("a", &[])]).key, DEFAULT_KEY);
    }

    #[test]
    fn the_form_becomes_the_search_then_the_curve() {
        let mut form = PredictForm::new(&[meta("a", &["batch=4"]), meta("b", &["batch=8"])]);
        form.capacity = " 4GiB ".into();
        let q = form.search_query().expect("ready");
        assert_eq!(q.runs, "a:4,b:8");
        assert_eq!((q.largest, q.capacity.as_deref(), q.step), (Some(true), Some("4GiB"), None));
        assert_eq!(serde_urlencoded::to_string(&q).expect("encodes"), "runs=a%3A4%2Cb%3A8&largest=true&capacity=4GiB");
        form.step = "x".into();
        assert!(form.search_query().expect_err("refused").contains("step"));
        form.step = "2".into();
        form.set_size("a", "");
        form.set_size("b", "");
        assert!(form.search_query().expect_err("refused").contains("at least one"));

        let searched = vec![(8, true), (16, true), (32, false), (24, true), (28, false)];
        let r = report(vec![prediction(24, 3 << 30, false), prediction(28, 5 << 30, true)], searched);
        let curve = curve_query(&q, &r).expect("sizes without a peak");
        assert_eq!((curve.at.as_deref(), curve.largest, curve.runs.as_str()), (Some("8,16,32"), None, "a:4,b:8"));
        let many = report(Vec::new(), (1..=100).map(|s| (s, s < 50)).collect());
        let at = curve_query(&q, &many).and_then(|c| c.at).expect("at");
        assert_eq!(at.split(',').count(), MAX_AT);
        assert!(at.starts_with("1,") && at.ends_with(",100"), "{at}");
        let full = report(vec![prediction(8, 1, false)], vec![(8, true)]);
        assert_eq!(curve_query(&q, &full), None);

        let mut answer = r.clone();
        answer.largest_fitting_size = Some(24);
        let curve_answer = report(
            vec![prediction(32, 6 << 30, true), prediction(8, 1 << 30, false), prediction(16, 2 << 30, false)],
            vec![],
        );
        let outcome = Outcome::new(answer, Some(curve_answer), "batch");
        let sizes: Vec<u64> = outcome.points.iter().map(|p| p.size).collect();
        assert_eq!(sizes, vec![8, 16, 24, 28, 32]);
        assert_eq!(outcome.verdict(), "Largest batch that fits in 4.00 GiB: 24.");
    }
}
