//! The tube index, in a file of its own below the tube registry
//! (`tube.rs`), which hands them out: the job table and the profiles,
//! which the registry's heaps are built on, carry tube indexes too.

/// Where a tube sits in the registry: what jobs' profiles, connections and
/// timers hold to refer to a tube (reused once the tube is dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub(super) struct TubeIx(u32);

/// The index of the `default` tube, which is never removed.
pub(super) const DEFAULT_TUBE: TubeIx = TubeIx(0);

impl TubeIx {
    /// The index of the registry's place `at`; the registry and tests
    /// that need no registry make them.
    pub(super) fn new(at: usize) -> TubeIx {
        TubeIx(u32::try_from(at).expect("fewer tubes than jobs"))
    }

    /// The index as a place in the registry.
    pub(super) fn at(self) -> usize {
        self.0 as usize
    }
}
