//! `vramscope check`'s verdict as JUnit XML, the file format CI systems
//! show as test results: one suite, one test case per rule and device, and
//! a report of a check that could not be made.

use vramscope_shared::analysis::check::CheckReport;
use vramscope_shared::analysis::stack_label;

use super::text::check::{describe, signed};

/// XML text with its five special characters escaped.
fn xml(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&apos;")
}

/// The verdict as JUnit XML, which CI systems show as test results: one
/// test case per rule and device; a broken rule's `<failure>` carries its
/// rule as `type`, its figures as `message`, and as text the figures and
/// the stacks that grew against the baseline. `seconds` is the check's
/// time, `started_ms` its start (for `timestamp`).
/// Written by hand: one suite of flat test cases is a few lines, where a
/// JUnit crate (quick-junit) would add an XML writer and a date library to
/// every build.
pub(crate) fn junit(name: &str, report: &CheckReport, seconds: f64, started_ms: i64) -> String {
    let mut grown = String::new();
    for g in report.grown.iter().filter(|g| !g.stacks.is_empty()) {
        grown += &format!("stacks that grew most against the baseline (all stacks {}):\n", signed(g.total_delta));
        for st in &g.stacks {
            grown += &format!("  {:>12}  {}\n", signed(st.delta), stack_label(&st.frames));
        }
    }
    let mut s = suite_head(name, report.rules.len(), report.failures as usize, 0, seconds, started_ms);
    for r in &report.rules {
        let case = format!("{} device {}", r.rule.option(), r.device);
        s += &format!("    <testcase classname=\"vramscope.check\" name=\"{}\" time=\"0\">", xml(&case));
        if r.passed {
            s += "</testcase>\n";
        } else {
            let text = format!("{}\n{grown}", describe(r));
            s += &format!(
                "\n      <failure type=\"{}\" message=\"{}\">{}</failure>\n    </testcase>\n",
                xml(r.rule.option()),
                xml(&describe(r)),
                xml(&text)
            );
        }
    }
    s + "  </testsuite>\n</testsuites>\n"
}

/// A JUnit report of a check that could not be made (exit 2): one test case
/// in error, so that a CI step reading the report (`if: always()`) shows why.
pub(crate) fn junit_error(name: &str, error: &str, seconds: f64, started_ms: i64) -> String {
    let mut s = suite_head(name, 1, 0, 1, seconds, started_ms);
    s += &format!(
        "    <testcase classname=\"vramscope.check\" name=\"check\" time=\"0\">\n      <error type=\"input\" \
         message=\"{}\">{}</error>\n    </testcase>\n",
        xml(error),
        xml(error)
    );
    s + "  </testsuite>\n</testsuites>\n"
}

/// The XML declaration and the opening of the one suite, with its counts.
fn suite_head(name: &str, tests: usize, failures: usize, errors: usize, seconds: f64, started_ms: i64) -> String {
    let (time, stamp) = (format!("{seconds:.3}"), timestamp(started_ms));
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"vramscope check\" tests=\"{tests}\" \
         failures=\"{failures}\" errors=\"{errors}\" time=\"{time}\">\n  <testsuite name=\"{}\" tests=\"{tests}\" \
         failures=\"{failures}\" errors=\"{errors}\" time=\"{time}\" timestamp=\"{stamp}\">\n",
        xml(name)
    )
}

/// `ms` since the epoch as JUnit's `timestamp`, UTC: `2026-12-04T18:22:34`
/// (days to a civil date by Howard Hinnant's algorithm: a few lines where a
/// date crate would be a dependency of every build).
fn timestamp(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}", rest / 3600, rest % 3600 / 60, rest % 60)
}

#[cfg(test)]
mod tests {
    use vramscope_shared::analysis::check::{CheckReport, Rule, RuleOutcome};

    use super::{junit, timestamp};

    #[test]
    fn junit_escapes_names_and_counts_failures() {
        let report = CheckReport {
            passed: false,
            failures: 1,
            rules: vec![RuleOutcome {
                rule: Rule::MaxReservedPeak,
                device: 0,
                passed: false,
                limit_bytes: Some(1 << 30),
                limit_pct: None,
                bytes: 2 << 30,
                baseline_bytes: None,
                pct: None,
                window_only: false,
            }],
            grown: vec![],
        };
        let x = junit("a<b>&\"c\".pickle", &report, 0.25, 1_796_408_554_000);
        assert!(x.contains("name=\"a&lt;b&gt;&amp;&quot;c&quot;.pickle\""), "{x}");
        assert!(x.contains("tests=\"1\" failures=\"1\" errors=\"0\" time=\"0.250\""), "{x}");
        assert!(x.contains("timestamp=\"2026-12-04T18:22:34\""), "{x}");
        assert!(
            x.contains("<failure type=\"--max-reserved-peak\" message=\"device 0: reserved peak 2 GiB, limit 1 GiB\">"),
            "{x}"
        );
        assert_eq!(timestamp(0), "1970-01-01T00:00:00");
        assert_eq!(timestamp(951_782_400_000), "2000-02-29T00:00:00");
    }
}
