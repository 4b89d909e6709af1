//! Chunked transfer coding (RFC 9112 section 7.1), checked as the bytes pass through:
//! where the body ends, whether its framing is valid, and (for an HTTP/2 client, which
//! gets the data without the framing) where its data and its trailer section are.

use std::ops::Range;

/// Largest trailer section of a chunked response.
const MAX_TRAILERS: usize = 64 * 1024;

/// Where a chunked body stands (RFC 9112 §7.1), fed the bytes as they pass through.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// In the hex chunk size.
    #[default]
    Size,
    /// In chunk extensions (or whitespace) after the size.
    Ext,
    /// After the size line's CR.
    SizeLf,
    /// In chunk data.
    Data,
    /// After chunk data: CR.
    DataCr,
    /// After chunk data: LF.
    DataLf,
    /// At the start of a trailer line (or of the final CRLF).
    Trailer,
    /// In a trailer line.
    TrailerLine,
    /// After a trailer line's CR.
    TrailerLf,
    /// After the final CR.
    EndLf,
}

/// What a range of a chunked body's bytes is, as [`Chunked::decode`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The contents of a chunk.
    Data,
    /// Part of the trailer section: the field lines after the last chunk, and the empty
    /// line that ends the body (RFC 9112 §7.1.2), CRLFs included.
    Trailers,
}

/// A chunked-body checker: finds where the body ends, rejects bad framing.
#[derive(Debug, Default)]
pub struct Chunked {
    state: ChunkState,
    /// Size of the current chunk (while in `Size`), or what is left of its data.
    size: u64,
    digits: u8,
    trailers: usize,
}

impl Chunked {
    /// Feeds the next bytes of the body: `Ok(Some(n))` when the body ends after `n` of
    /// them, `Ok(None)` when it goes on.
    pub fn feed(&mut self, data: &[u8]) -> Result<Option<usize>, &'static str> {
        self.decode(data, |_, _| {})
    }

    /// As [`feed`](Self::feed), and gives `at` where in `data` the body's data (the
    /// chunks' contents) and its trailer section are, in order.
    pub fn decode(
        &mut self,
        data: &[u8],
        mut at: impl FnMut(Part, Range<usize>),
    ) -> Result<Option<usize>, &'static str> {
        use ChunkState::*;
        let mut i = 0;
        // Where the trailer section starts in `data`, once in it.
        let mut trailers =
            matches!(self.state, Trailer | TrailerLine | TrailerLf | EndLf).then_some(0);
        while i < data.len() {
            let b = data[i];
            match self.state {
                Size => match (b as char).to_digit(16) {
                    Some(d) => {
                        if self.digits == 15 {
                            return Err("chunk size too large");
                        }
                        self.size = self.size * 16 + u64::from(d);
                        self.digits += 1;
                    }
                    None if self.digits == 0 => return Err("invalid chunk size"),
                    None => match b {
                        b';' | b' ' | b'\t' => self.state = Ext,
                        b'\r' => self.state = SizeLf,
                        _ => return Err("invalid chunk size"),
                    },
                },
                Ext => match b {
                    b'\r' => self.state = SizeLf,
                    b'\t' | 0x20..=0x7e | 0x80..=0xff => {}
                    _ => return Err("invalid chunk extension"),
                },
                SizeLf => {
                    if b != b'\n' {
                        return Err("chunk size line not ended by CRLF");
                    }
                    if self.size == 0 {
                        self.state = Trailer;
                        trailers = Some(i + 1);
                    } else {
                        self.state = Data;
                    }
                }
                Data => {
                    let take = self.size.min((data.len() - i) as u64);
                    at(Part::Data, i..i + take as usize);
                    self.size -= take;
                    i += take as usize;
                    if self.size == 0 {
                        self.state = DataCr;
                    }
                    continue;
                }
                DataCr | EndLf | TrailerLf | DataLf => {
                    let want = if self.state == DataCr { b'\r' } else { b'\n' };
                    if b != want {
                        return Err("chunk not ended by CRLF");
                    }
                    match self.state {
                        DataCr => self.state = DataLf,
                        DataLf => {
                            self.state = Size;
                            self.digits = 0;
                        }
                        TrailerLf => self.state = Trailer,
                        _ => {
                            at(Part::Trailers, trailers.unwrap_or(0)..i + 1);
                            return Ok(Some(i + 1));
                        }
                    }
                }
                Trailer | TrailerLine => {
                    self.trailers += 1;
                    if self.trailers > MAX_TRAILERS {
                        return Err("trailers too large");
                    }
                    match b {
                        b'\r' if self.state == Trailer => self.state = EndLf,
                        b'\r' => self.state = TrailerLf,
                        b'\n' => return Err("trailer line not ended by CRLF"),
                        _ => self.state = TrailerLine,
                    }
                }
            }
            i += 1;
        }
        if let Some(from) = trailers.filter(|&f| f < data.len()) {
            at(Part::Trailers, from..data.len());
        }
        Ok(None)
    }
}
