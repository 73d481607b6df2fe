//! multiproc
