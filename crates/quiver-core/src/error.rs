//! The engine's error type. Every error has a stable code that the bindings pass to
//! JavaScript unchanged (`err.code`), so callers branch on codes, never on messages.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A parameter is out of range or inconsistent (bad dimension, m = 0, NaN value).
    InvalidArgument,
    /// A vector's length differs from the index dimension.
    DimensionMismatch,
    /// A label, file or record that was asked for does not exist.
    NotFound,
    /// The operating system refused an I/O operation.
    Io,
    /// Stored bytes fail their checksum or structure check.
    Corrupt,
    /// A file written by a newer or unknown format version.
    UnsupportedFormat,
    /// The object was closed or is being used after a fatal error.
    Closed,
    /// This backend cannot do what was asked (e.g. files on wasm32).
    Unsupported,
}

impl ErrorKind {
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "QUIVER_INVALID_ARGUMENT",
            ErrorKind::DimensionMismatch => "QUIVER_DIMENSION_MISMATCH",
            ErrorKind::NotFound => "QUIVER_NOT_FOUND",
            ErrorKind::Io => "QUIVER_IO",
            ErrorKind::Corrupt => "QUIVER_CORRUPT",
            ErrorKind::UnsupportedFormat => "QUIVER_UNSUPPORTED_FORMAT",
            ErrorKind::Closed => "QUIVER_CLOSED",
            ErrorKind::Unsupported => "QUIVER_UNSUPPORTED",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into() }
    }
    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidArgument, message)
    }
    pub fn corrupt(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Corrupt, message)
    }
    pub fn io(context: &str, e: std::io::Error) -> Error {
        Error::new(ErrorKind::Io, format!("{}: {}", context, e))
    }
    pub fn code(&self) -> &'static str {
        self.kind.code()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.code(), self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
