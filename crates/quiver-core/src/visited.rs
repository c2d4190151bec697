//! Visited sets for graph traversal, pooled and cleared by a generation bump.
//!
//! Owns: "has this node been seen in this search". Must never: be cleared with a
//! memset on the hot path (only when the 16-bit generation wraps).

use std::sync::Mutex;

pub struct VisitedSet {
    tags: Vec<u16>,
    generation: u16,
}

impl VisitedSet {
    pub fn new(capacity: usize) -> VisitedSet {
        VisitedSet { tags: vec![0; capacity], generation: 0 }
    }

    /// Starts a new search over at least `n` nodes.
    pub fn reset(&mut self, n: usize) {
        if self.tags.len() < n {
            self.tags.resize(n, 0);
        }
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            for t in self.tags.iter_mut() {
                *t = 0;
            }
            self.generation = 1;
        }
    }

    /// Marks `i` visited; returns whether it already was.
    #[inline]
    pub fn check_and_mark(&mut self, i: u32) -> bool {
        let g = self.generation;
        // Safety net, not a hot-path branch in practice: callers reset with n >= node count.
        let t = &mut self.tags[i as usize];
        if *t == g {
            true
        } else {
            *t = g;
            false
        }
    }

    #[inline]
    pub fn is_marked(&self, i: u32) -> bool {
        self.tags[i as usize] == self.generation
    }
}

/// A pool of visited sets so concurrent searches do not allocate.
pub struct VisitedPool {
    free: Mutex<Vec<VisitedSet>>,
}

impl VisitedPool {
    pub fn new() -> VisitedPool {
        VisitedPool { free: Mutex::new(Vec::new()) }
    }

    pub fn take(&self, n: usize) -> VisitedSet {
        let popped = self.free.lock().map(|mut v| v.pop()).unwrap_or(None);
        let mut set = match popped {
            Some(s) => s,
            None => VisitedSet::new(n),
        };
        set.reset(n);
        set
    }

    pub fn give(&self, set: VisitedSet) {
        if let Ok(mut v) = self.free.lock() {
            // Keep a handful; more concurrent searches than this just allocate.
            if v.len() < 64 {
                v.push(set);
            }
        }
    }

    pub fn clear(&self) {
        if let Ok(mut v) = self.free.lock() {
            v.clear();
        }
    }
}

impl Default for VisitedPool {
    fn default() -> Self {
        VisitedPool::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_clear_without_memset_and_survive_wraparound() {
        let mut s = VisitedSet::new(4);
        for _ in 0..70_000u32 {
            s.reset(4);
            assert!(!s.check_and_mark(2));
            assert!(s.check_and_mark(2));
            assert!(!s.is_marked(3));
        }
    }

    #[test]
    fn pool_reuses_and_grows() {
        let p = VisitedPool::new();
        let s = p.take(10);
        p.give(s);
        let mut s = p.take(100);
        assert!(!s.check_and_mark(99));
    }
}
