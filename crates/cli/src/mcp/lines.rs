//! The MCP server's byte streams, one JSON-RPC message a line, between the
//! client and rmcp: a line that is not JSON gets the JSON-RPC parse error
//! (-32700, id null) and the server reads on (rmcp's stdio transport drops
//! such a line without a word, so that a client echoing errors back cannot
//! start a storm; a line of the client's is answered once and never echoed).
//!
//! Owns the line framing of the client's side only: what is JSON is passed
//! to rmcp unchanged (rmcp answers JSON that is no JSON-RPC message itself,
//! with -32600), and every line to the client, rmcp's and these errors, is
//! written whole by one task, so that no two interleave. A parse error is
//! queued when its line is read, before any later line reaches rmcp: it
//! comes before the answers to the requests that follow it.

use serde_json::json;
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The longest line read (rmcp's own limit).
pub const MAX_LINE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// Bytes buffered between these tasks and rmcp, each way.
const PIPE_BYTES: usize = 64 << 10;

/// Lines waiting for the writer (back-pressure beyond).
const QUEUED_LINES: usize = 64;

/// The tasks between the client's streams and rmcp.
pub struct Lines {
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

impl Lines {
    /// Once rmcp has stopped (its end of both pipes closed): waits until
    /// every line for the client is written. The client's stream may still
    /// be open (rmcp stopped for another reason): its reader is stopped.
    pub async fn finish(self) {
        self.reader.abort();
        let _ = self.reader.await;
        let _ = self.writer.await;
    }
}

/// Starts the tasks between `input`/`output` (the client) and the returned
/// pair, which rmcp serves on (it reads the first and writes the second).
/// Each is one end of an in-memory pipe whose other end is these tasks';
/// dropping an end closes its pipe both ways (rmcp sees its input end
/// when the client's does, and the writer learns that rmcp is done).
pub fn start<R, W>(input: R, output: W) -> ((DuplexStream, DuplexStream), Lines)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (rmcp_input, to_rmcp) = tokio::io::duplex(PIPE_BYTES);
    let (from_rmcp, rmcp_output) = tokio::io::duplex(PIPE_BYTES);
    let (lines, queued) = mpsc::channel(QUEUED_LINES);
    let reader = tokio::spawn(read_client(BufReader::new(input), to_rmcp, lines.clone()));
    let pump = tokio::spawn(pass_rmcp_lines(BufReader::new(from_rmcp), lines));
    let writer = tokio::spawn(async move {
        write_lines(output, queued).await;
        let _ = pump.await;
    });
    ((rmcp_input, rmcp_output), Lines { reader, writer })
}

/// What one line from the client is.
#[derive(Debug, PartialEq)]
enum Kind {
    /// Empty or blanks only: skipped, as rmcp skips empty lines.
    Blank,
    Json,
    /// Not JSON: why.
    NotJson(String),
}

fn classify(line: &[u8]) -> Kind {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    // RFC 8259 lets a parser ignore a leading byte order mark; rmcp does.
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Kind::Blank;
    }
    match serde_json::from_slice::<serde::de::IgnoredAny>(line) {
        Ok(_) => Kind::Json,
        Err(e) => Kind::NotJson(e.to_string()),
    }
}

/// The JSON-RPC parse error for line `number`, as one line.
fn parse_error(number: u64, why: &str) -> Vec<u8> {
    let message = format!(
        "Parse error: line {number} is not JSON ({why}); send one JSON-RPC message per line"
    );
    let mut line = json!({"jsonrpc": "2.0", "id": null,
                          "error": {"code": -32700, "message": message}})
    .to_string()
    .into_bytes();
    line.push(b'\n');
    line
}

/// How one bounded line read ended.
enum Read {
    /// A whole line (with its '\n') is in the buffer.
    Line,
    /// A line longer than [`MAX_LINE`], read past and dropped.
    TooLong,
    /// The stream ended (a last line without '\n' is dropped, as rmcp does).
    End,
}

/// Reads one line into `line`, never holding more than `max` bytes of it.
async fn read_line<R: AsyncBufRead + Unpin>(
    input: &mut R,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Read> {
    line.clear();
    let mut too_long = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(Read::End);
        }
        let newline = available.iter().position(|&b| b == b'\n');
        let take = newline.map_or(available.len(), |i| i + 1);
        if !too_long && line.len() + take > max {
            too_long = true;
            line.clear();
        }
        if !too_long {
            line.extend_from_slice(&available[..take]);
        }
        input.consume(take);
        if newline.is_some() {
            return Ok(if too_long { Read::TooLong } else { Read::Line });
        }
    }
}

/// Reads the client's lines: JSON goes to rmcp, anything else gets its
/// parse error. Ends with the client's stream (rmcp then sees its input
/// end) or when rmcp or the writer is gone.
async fn read_client<R: AsyncBufRead + Unpin>(
    mut input: R,
    mut to_rmcp: DuplexStream,
    replies: mpsc::Sender<Vec<u8>>,
) {
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        let read = match read_line(&mut input, &mut line, MAX_LINE).await {
            Ok(read) => read,
            Err(_) => return,
        };
        number += 1;
        let reply = match read {
            Read::End => return,
            Read::TooLong => parse_error(
                number,
                &format!("longer than {} MiB, not read", MAX_LINE >> 20),
            ),
            Read::Line => match classify(&line) {
                Kind::Blank => continue,
                Kind::Json => {
                    if to_rmcp.write_all(&line).await.is_err() {
                        return;
                    }
                    continue;
                }
                Kind::NotJson(why) => parse_error(number, &why),
            },
        };
        if replies.send(reply).await.is_err() {
            return;
        }
    }
}

/// Passes rmcp's output on to the writer a whole line at a time.
async fn pass_rmcp_lines<R: AsyncBufRead + Unpin>(mut from_rmcp: R, lines: mpsc::Sender<Vec<u8>>) {
    loop {
        let mut line = Vec::new();
        match from_rmcp.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if lines.send(line).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Writes each queued line whole, flushed, until every sender is gone or
/// the client's stream fails.
async fn write_lines<W: AsyncWrite + Unpin>(mut output: W, mut lines: mpsc::Receiver<Vec<u8>>) {
    while let Some(line) = lines.recv().await {
        if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[test]
    fn lines_are_json_blank_or_not_json() {
        assert_eq!(classify(b"{\"jsonrpc\": \"2.0\"}\n"), Kind::Json);
        assert_eq!(classify(b"\xEF\xBB\xBF[1, 2]\r\n"), Kind::Json);
        assert_eq!(classify(b"  \t\r\n"), Kind::Blank);
        assert_eq!(classify(b"\n"), Kind::Blank);
        for bad in [&b"nope\n"[..], b"{\"id\": 1,\n", b"{} {}\n", b"\xff\n"] {
            assert!(
                matches!(classify(bad), Kind::NotJson(_)),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_line_past_the_limit_is_dropped_whole_and_the_next_one_read() {
        runtime().block_on(async {
            let mut long = vec![b'x'; 100];
            long.extend_from_slice(b"\n{}\n");
            let mut input = BufReader::with_capacity(16, &long[..]);
            let mut line = Vec::new();
            assert!(matches!(
                read_line(&mut input, &mut line, 50).await.unwrap(),
                Read::TooLong
            ));
            assert!(matches!(
                read_line(&mut input, &mut line, 50).await.unwrap(),
                Read::Line
            ));
            assert_eq!(line, b"{}\n");
            assert!(matches!(
                read_line(&mut input, &mut line, 50).await.unwrap(),
                Read::End
            ));
        });
    }

    #[test]
    fn json_reaches_rmcp_unchanged_and_a_bad_line_is_answered_first() {
        runtime().block_on(async {
            let input: &[u8] = b"{\"a\": 1}\nbad\n\n{\"b\": 2}\n";
            let (client_out, mut client_reads) = tokio::io::duplex(1 << 16);
            let ((mut rmcp_in, mut rmcp_out), lines) = start(input, client_out);
            let mut seen = String::new();
            rmcp_in.read_to_string(&mut seen).await.unwrap();
            assert_eq!(seen, "{\"a\": 1}\n{\"b\": 2}\n");
            rmcp_out.write_all(b"{\"answer\": 2}\n").await.unwrap();
            drop((rmcp_in, rmcp_out));
            lines.finish().await;
            let mut written = String::new();
            client_reads.read_to_string(&mut written).await.unwrap();
            let written: Vec<serde_json::Value> = written
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            assert_eq!(written.len(), 2, "{written:?}");
            assert_eq!(written[0]["error"]["code"], -32700);
            assert_eq!(written[0]["id"], serde_json::Value::Null);
            assert!(
                written[0]["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("line 2 is not JSON"),
                "{written:?}"
            );
            assert_eq!(written[1], json!({"answer": 2}));
        });
    }
}
