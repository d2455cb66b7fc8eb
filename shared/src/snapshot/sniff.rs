//! What a file that is no pickle looks like, to say so before the pickle
//! reader's own error ("unknown opcode 0x23 at byte 0" tells a user who
//! picked a README or a `torch.save` checkpoint nothing).

/// Whether `head` (the first bytes of the pickle stream) could start a
/// pickle: PROTO (protocols 2 to 5, all PyTorch writes), or the MARK,
/// EMPTY_DICT or EMPTY_LIST protocols 0 and 1 begin a container with.
pub(crate) fn starts_like_a_pickle(head: &[u8]) -> bool {
    matches!(head.first(), Some(0x80 | b'(' | b'}' | b']'))
}

/// What `head` (a file's first bytes) looks like, in words: the kinds of
/// file people pick by mistake, else its first bytes in hex.
pub(crate) fn looks_like(head: &[u8]) -> String {
    const MAGIC: &[(&[u8], &str)] = &[
        (
            b"PK\x03\x04",
            "a ZIP archive, which is what torch.save writes (a model or a checkpoint, not a memory snapshot)",
        ),
        (b"\x89PNG", "a PNG image"),
        (b"%PDF", "a PDF document"),
        (b"\x7fELF", "a program (ELF)"),
        (b"\x93NUMPY", "a NumPy array (.npy)"),
        (b"SQLite format 3", "an SQLite database"),
    ];
    if head.is_empty() {
        return "an empty file".to_owned();
    }
    if let Some((_, what)) = MAGIC.iter().find(|(magic, _)| head.starts_with(magic)) {
        return (*what).to_owned();
    }
    let text = match std::str::from_utf8(head) {
        Ok(text) => Some(text),
        // A multi-byte character cut at the end of the head is still text.
        Err(e) if e.error_len().is_none() => std::str::from_utf8(&head[..e.valid_up_to()]).ok(),
        Err(_) => None,
    };
    if let Some(text) = text.filter(|t| t.chars().all(|c| !c.is_control() || c.is_whitespace())) {
        let start: String =
            text.trim_start().chars().take(40).map(|c| if c.is_whitespace() { ' ' } else { c }).collect();
        let kind = match text.trim_start().chars().next() {
            Some('{' | '[') => "a JSON or other text file",
            Some('<') => "an HTML or XML file",
            _ => "a text file",
        };
        return format!("{kind} (it starts with {start:?})");
    }
    let hex: Vec<String> = head.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("binary data that is not a pickle (it starts with bytes {}; a pickle starts with 80)", hex.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_picked_by_mistake_are_named() {
        assert_eq!(looks_like(b""), "an empty file");
        assert!(looks_like(b"PK\x03\x04rest").contains("torch.save"));
        assert_eq!(
            looks_like(b"# vramscope\n\nA self-hosted"),
            "a text file (it starts with \"# vramscope  A self-hosted\")"
        );
        assert!(looks_like(b"  {\"a\": 1}").starts_with("a JSON or other text file"));
        assert!(looks_like(b"<!doctype html>").starts_with("an HTML or XML file"));
        assert!(looks_like("caf\u{e9}".as_bytes()).starts_with("a text file"), "UTF-8 text");
        assert!(looks_like(&"é".as_bytes()[..1]).starts_with("a text file"), "a character cut at the end");
        assert_eq!(
            looks_like(&[0x10, 0xff, 0x00, 0x3a]),
            "binary data that is not a pickle (it starts with bytes 10 ff 00 3a; a pickle starts with 80)"
        );
    }

    #[test]
    fn pickles_of_every_protocol_are_not_second_guessed() {
        assert!(starts_like_a_pickle(b"\x80\x04"));
        assert!(starts_like_a_pickle(b"(dp0"));
        assert!(starts_like_a_pickle(b"}q\x00"));
        assert!(!starts_like_a_pickle(b"hello"));
        assert!(!starts_like_a_pickle(b""));
    }
}
