//! The netns runtime.
