//! Cutting a tool's JSON to a size an assistant can read: arrays are
//! shortened, all to the same length, the longest first kept, until the
//! answer fits; what was cut is named (its JSON pointer, kept and total
//! counts) with where the whole answer is.

use serde_json::{Map, Value, json};

/// The most characters of JSON one answer gives (about 6,000 tokens).
pub(crate) const MAX_ANSWER_CHARS: usize = 24_000;

/// Array lengths tried, longest first.
const KEEP: &[usize] = &[200, 100, 50, 20, 10, 5, 3, 1, 0];

fn size(value: &Value) -> usize {
    serde_json::to_string(value).map_or(usize::MAX, |s| s.len())
}

/// `value` with every array longer than `keep` shortened to `keep`, and the
/// cuts recorded as (pointer, kept, total).
fn shorten(value: &mut Value, keep: usize, path: &mut String, cuts: &mut Vec<Value>) {
    match value {
        Value::Array(items) => {
            if items.len() > keep {
                cuts.push(json!({ "path": path.clone(), "kept": keep, "of": items.len() }));
                items.truncate(keep);
            }
            for (i, item) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push_str(&format!("/{i}"));
                shorten(item, keep, path, cuts);
                path.truncate(len);
            }
        }
        Value::Object(fields) => {
            for (key, field) in fields.iter_mut() {
                let len = path.len();
                path.push('/');
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                shorten(field, keep, path, cuts);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// `value` cut to at most about `max_chars` of JSON. When something was cut,
/// an object answer gains `"truncated": {"arrays": [...], "full_answer": more}`.
pub(crate) fn cut(value: Value, max_chars: usize, more: Option<&str>) -> Value {
    if size(&value) <= max_chars {
        return value;
    }
    let mut last = None;
    for &keep in KEEP {
        let mut shortened = value.clone();
        let mut cuts = Vec::new();
        shorten(&mut shortened, keep, &mut String::new(), &mut cuts);
        let fits = size(&shortened) <= max_chars;
        last = Some((shortened, cuts));
        if fits {
            break;
        }
    }
    let Some((shortened, cuts)) = last else { return value };
    let note = json!({
        "arrays": cuts,
        "full_answer": more.unwrap_or("the same command line with --json"),
    });
    match shortened {
        Value::Object(mut fields) => {
            fields.insert("truncated".to_owned(), note);
            Value::Object(fields)
        }
        other => {
            let mut fields = Map::new();
            fields.insert("answer".to_owned(), other);
            fields.insert("truncated".to_owned(), note);
            Value::Object(fields)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_answer_is_untouched() {
        let v = json!({"a": [1, 2, 3]});
        assert_eq!(cut(v.clone(), 100, None), v);
    }

    #[test]
    fn long_arrays_are_cut_and_named() {
        let v = json!({"devices": [{"stacks": (0..1000).collect::<Vec<_>>()}]});
        let c = cut(v, 200, Some("see the dashboard"));
        let stacks = c["devices"][0]["stacks"].as_array().expect("array");
        assert!(stacks.len() < 1000 && !stacks.is_empty(), "{c}");
        assert!(serde_json::to_string(&c).expect("json").len() <= 400, "{c}");
        let cuts = c["truncated"]["arrays"].as_array().expect("cuts");
        assert_eq!(cuts[0]["path"], "/devices/0/stacks");
        assert_eq!(cuts[0]["of"], 1000);
        assert_eq!(c["truncated"]["full_answer"], "see the dashboard");
    }
}
