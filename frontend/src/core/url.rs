//! Query strings for the API's URLs.

/// A query string (without `?`) of the pairs whose value is given, values
/// percent-encoded (everything but `A-Z a-z 0-9 - _ . ~`).
pub fn query(pairs: &[(&str, Option<String>)]) -> String {
    let mut out = String::new();
    for (key, value) in pairs {
        let Some(value) = value else { continue };
        if !out.is_empty() {
            out.push('&');
        }
        out.push_str(key);
        out.push('=');
        for b in value.bytes() {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_encode_values_and_skip_missing_ones() {
        let q = query(&[
            ("alloc_conf", Some("max_split_size_mb:512,expandable_segments:True".to_owned())),
            ("capacity", None),
            ("px", Some("800".to_owned())),
        ]);
        assert_eq!(q, "alloc_conf=max_split_size_mb%3A512%2Cexpandable_segments%3ATrue&px=800");
        assert_eq!(query(&[]), "");
    }
}
