//! gradsparse
