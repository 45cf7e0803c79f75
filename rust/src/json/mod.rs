//! JSON: the document scanner (a lazy view of the fields the pipeline reads), decoding of
//! string literals, and Python-compatible compact dumps of parameter values.

pub mod dump;
pub mod literal;
pub mod scan;
pub mod unescape;
