//! proptests
