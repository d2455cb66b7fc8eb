//! Cutting a tool's JSON to a size an assistant can read: the array that
//! weighs most is halved, again and again, until the answer fits, so the
//! long lists (stacks, blocks) lose their tails while each kept item stays
//! whole; what was cut is named (its JSON pointer, kept and total counts)
//! with where the whole answer is.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// The most characters of JSON one answer gives (about 6,000 tokens).
pub(crate) const MAX_ANSWER_CHARS: usize = 24_000;

fn size(value: &Value) -> usize {
    serde_json::to_string(value).map_or(usize::MAX, |s| s.len())
}

/// The array of `value` with at least `min_len` items whose JSON is
/// longest: its pointer and size. (A one-item list, like the devices of a
/// one-GPU snapshot, is weighed through its item, not emptied.)
fn heaviest_array(value: &Value, min_len: usize, path: &mut String, best: &mut Option<(String, usize)>) {
    let children: Box<dyn Iterator<Item = (String, &Value)>> = match value {
        Value::Array(items) => {
            let weight = size(value);
            if items.len() >= min_len.max(1) && best.as_ref().is_none_or(|(_, w)| weight > *w) {
                *best = Some((path.clone(), weight));
            }
            Box::new(items.iter().enumerate().map(|(i, v)| (i.to_string(), v)))
        }
        Value::Object(fields) => Box::new(fields.iter().map(|(k, v)| (k.replace('~', "~0").replace('/', "~1"), v))),
        _ => return,
    };
    for (key, child) in children {
        let len = path.len();
        path.push('/');
        path.push_str(&key);
        heaviest_array(child, min_len, path, best);
        path.truncate(len);
    }
}

/// `value` cut to at most `max_chars` of JSON. When something was cut, an
/// object answer gains `"truncated": {"arrays": [...], "full_answer": more}`.
pub(crate) fn cut(mut value: Value, max_chars: usize, more: Option<&str>) -> Value {
    // (pointer) -> (kept, of)
    let mut cuts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    while size(&value) > max_chars {
        let mut best = None;
        heaviest_array(&value, 2, &mut String::new(), &mut best);
        if best.is_none() {
            heaviest_array(&value, 1, &mut String::new(), &mut best);
        }
        let Some((pointer, _)) = best else { break };
        let Some(Value::Array(items)) = value.pointer_mut(&pointer) else { break };
        let of = items.len();
        items.truncate(of / 2);
        let kept = items.len();
        cuts.entry(pointer).and_modify(|c| c.0 = kept).or_insert((kept, of));
    }
    if cuts.is_empty() {
        return value;
    }
    let arrays: Vec<Value> =
        cuts.into_iter().map(|(path, (kept, of))| json!({ "path": path, "kept": kept, "of": of })).collect();
    let note = json!({
        "arrays": arrays,
        "full_answer": more.unwrap_or("the same command line with --json"),
    });
    match value {
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
        let stack = json!({"frames": ["a.py:1 f", "b.py:2 g", "c.py:3 h"]});
        let v = json!({"devices": [{"stacks": vec![stack.clone(); 1000]}]});
        let c = cut(v, 2_000, Some("see the dashboard"));
        let stacks = c["devices"][0]["stacks"].as_array().expect("array");
        assert!(stacks.len() < 1000 && !stacks.is_empty(), "{c}");
        assert!(stacks.iter().all(|s| *s == stack), "each kept item whole: {c}");
        assert!(serde_json::to_string(&c["devices"]).expect("json").len() <= 2_000, "{c}");
        let cuts = c["truncated"]["arrays"].as_array().expect("cuts");
        assert_eq!(cuts[0]["path"], "/devices/0/stacks");
        assert_eq!(cuts[0]["of"], 1000);
        assert_eq!(c["truncated"]["full_answer"], "see the dashboard");
    }
}
