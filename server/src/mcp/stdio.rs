//! The stdio framing in front of rmcp: every line a client sends gets an
//! answer, as JSON-RPC 2.0 asks.
//!
//! rmcp's stdio loop answers the requests it can parse and drops the rest:
//! a line that is not JSON got no reply, a line over its limit was dropped
//! silently (the client hung), and `tools/call` without `params` was
//! answered -32601 (method not found). This screen reads the lines itself,
//! bounded, answers what is malformed (-32700 parse error, -32600 invalid
//! request, -32602 invalid params, each with `"id": null` when the id
//! cannot be read), and hands rmcp only well-formed messages. rmcp's
//! answers and the screen's share one writer, a whole line at a time.
//!
//! The line reader is written here rather than taken from
//! `tokio_util::codec::LinesCodec`: after one over-long or non-UTF-8 line a
//! framed stream ends, and this one must go on reading the next request.

use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// Most bytes of one request line: the HTTP route's default body limit
/// (`max_body_bytes`, 256 KiB). A tool's arguments are paths, ids and
/// numbers; a comment's text fits many times over.
pub(crate) const MAX_REQUEST_LINE_BYTES: usize = 256 << 10;

/// JSON-RPC's error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;

/// One line read from the client.
#[derive(Debug, PartialEq)]
enum Line {
    /// A line (without its newline) within the limit.
    Whole(Vec<u8>),
    /// A line over the limit, skipped to its end.
    TooLong,
}

/// Read the next line, keeping at most `max` bytes of it; `None` at the end
/// of the input. A last line without a newline counts.
async fn next_line(input: &mut (impl AsyncBufRead + Unpin), max: usize) -> std::io::Result<Option<Line>> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => Some(Line::TooLong),
                (false, true) => None,
                (false, false) => Some(Line::Whole(line)),
            });
        }
        let (chunk, ends) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if !too_long && line.len() + chunk.len() <= max {
            line.extend_from_slice(chunk);
        } else {
            too_long = true;
            line = Vec::new();
        }
        let consumed = ends.unwrap_or(available.len());
        input.consume(consumed);
        if ends.is_some() {
            return Ok(Some(if too_long { Line::TooLong } else { Line::Whole(line) }));
        }
    }
}

/// An error reply to the request `id` (`null` when it cannot be read).
fn error_reply(id: Value, code: i64, message: String) -> Vec<u8> {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }).to_string().into_bytes()
}

/// What to do with one line: hand it to rmcp, or answer it here.
#[derive(Debug, PartialEq)]
enum Verdict {
    Forward,
    Reply(Vec<u8>),
    Ignore,
}

fn screen(line: &[u8]) -> Verdict {
    let text = line.strip_suffix(b"\r").unwrap_or(line);
    if text.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Ignore;
    }
    let message: Value = match serde_json::from_slice(text) {
        Ok(v) => v,
        // serde's message names the line and column, never the input.
        Err(e) => return Verdict::Reply(error_reply(Value::Null, PARSE_ERROR, format!("parse error: {e}"))),
    };
    let Value::Object(fields) = &message else {
        let what = if message.is_array() { "a batch (JSON-RPC batches are not taken)" } else { "not an object" };
        return Verdict::Reply(error_reply(Value::Null, INVALID_REQUEST, format!("invalid request: {what}")));
    };
    // An id is a string, a number or null; anything else cannot be echoed.
    let id = match fields.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id.clone(),
        Some(_) => {
            return Verdict::Reply(error_reply(
                Value::Null,
                INVALID_REQUEST,
                "invalid request: \"id\" must be a string or a number".to_owned(),
            ));
        }
        None => Value::Null,
    };
    let invalid = |message: &str| Verdict::Reply(error_reply(id.clone(), INVALID_REQUEST, message.to_owned()));
    if fields.get("jsonrpc") != Some(&Value::from("2.0")) {
        return invalid("invalid request: \"jsonrpc\" must be \"2.0\"");
    }
    match fields.get("method") {
        Some(Value::String(method)) => {
            let params_ok =
                matches!(fields.get("params"), Some(Value::Object(p)) if p.get("name").is_some_and(Value::is_string));
            if method == "tools/call" && !params_ok {
                return Verdict::Reply(error_reply(
                    id,
                    INVALID_PARAMS,
                    "invalid params: tools/call needs \"params\": {\"name\": TOOL, \"arguments\": {...}}".to_owned(),
                ));
            }
            Verdict::Forward
        }
        Some(_) => invalid("invalid request: \"method\" must be a string"),
        // A response to a request of the server's own.
        None if fields.contains_key("id") && (fields.contains_key("result") || fields.contains_key("error")) => {
            Verdict::Forward
        }
        None => invalid("invalid request: no \"method\""),
    }
}

/// Read the client's lines from `input`; hand the well-formed ones to rmcp
/// (`to_rmcp`) and answer the others on `replies`. Ends at the end of the
/// input, which closes `to_rmcp` (rmcp then ends the session).
pub(crate) async fn screen_requests(
    input: impl AsyncRead + Unpin,
    mut to_rmcp: impl AsyncWrite + Unpin,
    replies: mpsc::Sender<Vec<u8>>,
) -> std::io::Result<()> {
    let mut input = BufReader::with_capacity(64 << 10, input);
    while let Some(line) = next_line(&mut input, MAX_REQUEST_LINE_BYTES).await? {
        let verdict = match line {
            Line::TooLong => Verdict::Reply(error_reply(
                Value::Null,
                INVALID_REQUEST,
                format!("invalid request: a line over {MAX_REQUEST_LINE_BYTES} bytes, not read"),
            )),
            Line::Whole(line) => match screen(&line) {
                Verdict::Forward => {
                    to_rmcp.write_all(&line).await?;
                    to_rmcp.write_all(b"\n").await?;
                    to_rmcp.flush().await?;
                    continue;
                }
                other => other,
            },
        };
        if let Verdict::Reply(reply) = verdict
            && replies.send(reply).await.is_err()
        {
            break;
        }
    }
    to_rmcp.shutdown().await
}

/// Pass rmcp's answers, line by line, to the one writer.
pub(crate) async fn relay_answers(
    from_rmcp: impl AsyncRead + Unpin,
    replies: mpsc::Sender<Vec<u8>>,
) -> std::io::Result<()> {
    let mut lines = BufReader::new(from_rmcp).split(b'\n');
    while let Some(line) = lines.next_segment().await? {
        if replies.send(line).await.is_err() {
            break;
        }
    }
    Ok(())
}

/// Write every message to `output`, each as one line.
pub(crate) async fn write_lines(
    mut output: impl AsyncWrite + Unpin,
    mut messages: mpsc::Receiver<Vec<u8>>,
) -> std::io::Result<()> {
    while let Some(message) = messages.recv().await {
        output.write_all(&message).await?;
        output.write_all(b"\n").await?;
        output.flush().await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<Line> {
        let mut reader = BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        while let Some(line) = next_line(&mut reader, max).await.expect("read") {
            out.push(line);
        }
        out
    }

    #[tokio::test]
    async fn an_over_long_line_is_skipped_to_its_end_and_reading_goes_on() {
        let got = lines(b"short\nthis one is too long\nok\nlast", 8).await;
        assert_eq!(
            got,
            vec![
                Line::Whole(b"short".to_vec()),
                Line::TooLong,
                Line::Whole(b"ok".to_vec()),
                Line::Whole(b"last".to_vec())
            ]
        );
        assert_eq!(lines(b"0123456789", 8).await, vec![Line::TooLong]);
        assert_eq!(lines(b"", 8).await, Vec::<Line>::new());
    }

    fn reply(verdict: Verdict) -> Value {
        match verdict {
            Verdict::Reply(bytes) => serde_json::from_slice(&bytes).expect("JSON"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn malformed_lines_are_answered_with_their_json_rpc_error() {
        let r = reply(screen(b"not json"));
        assert_eq!((r["id"].clone(), r["error"]["code"].clone()), (Value::Null, json!(PARSE_ERROR)), "{r}");
        assert!(r.as_object().expect("object").contains_key("id"), "id: null is written");
        let r = reply(screen(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#));
        assert_eq!(r["error"]["code"], INVALID_REQUEST);
        let r = reply(screen(br#"{"jsonrpc":"1.0","id":5,"method":"ping"}"#));
        assert_eq!((r["id"].clone(), r["error"]["code"].clone()), (json!(5), json!(INVALID_REQUEST)));
        let r = reply(screen(br#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#));
        assert_eq!(r["id"], Value::Null);
        let r = reply(screen(br#"{"jsonrpc":"2.0","id":"a","method":"tools/call"}"#));
        assert_eq!((r["id"].clone(), r["error"]["code"].clone()), (json!("a"), json!(INVALID_PARAMS)));
        let r = reply(screen(br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{}}"#));
        assert_eq!(r["error"]["code"], INVALID_PARAMS);
        let r = reply(screen(br#"{"jsonrpc":"2.0","id":3}"#));
        assert_eq!(r["error"]["code"], INVALID_REQUEST);
    }

    #[test]
    fn well_formed_messages_go_to_rmcp() {
        assert_eq!(screen(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#), Verdict::Forward);
        assert_eq!(screen(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), Verdict::Forward);
        assert_eq!(
            screen(br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"stats","arguments":{}}}"#),
            Verdict::Forward
        );
        assert_eq!(screen(br#"{"jsonrpc":"2.0","id":9,"result":{}}"#), Verdict::Forward);
        assert_eq!(screen(b"   \r"), Verdict::Ignore);
    }
}
