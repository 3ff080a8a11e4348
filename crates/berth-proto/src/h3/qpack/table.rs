//! The dynamic table (RFC 9204 §3.2), as both sides keep it: entries in insertion order,
//! each with an absolute index that never changes (§3.2.4), evicted oldest first to stay
//! within the capacity (§3.2.2). The decoder's copy follows the peer's encoder stream; the
//! encoder's is the one it decides on, with its own rules for what may be evicted.

use std::collections::VecDeque;

use super::ENTRY_OVERHEAD;

/// One entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The field name.
    pub name: Vec<u8>,
    /// The field value.
    pub value: Vec<u8>,
}

impl Entry {
    /// Its size as §3.2.1 counts it: name and value lengths (not Huffman-coded) plus 32.
    pub fn size(&self) -> usize {
        entry_size(&self.name, &self.value)
    }
}

/// The size of an entry `name: value` (§3.2.1).
pub fn entry_size(name: &[u8], value: &[u8]) -> usize {
    name.len() + value.len() + ENTRY_OVERHEAD
}

/// A dynamic table.
#[derive(Debug, Default)]
pub struct Table {
    /// Oldest first: `entries[i]` has absolute index `dropped + i`.
    entries: VecDeque<Entry>,
    /// Entries evicted so far: the absolute index of the oldest one left.
    dropped: u64,
    size: usize,
    capacity: usize,
}

impl Table {
    /// Entries inserted since the start, evicted ones included (§2.1.4's Insert Count).
    pub fn insert_count(&self) -> u64 {
        self.dropped + self.entries.len() as u64
    }

    /// The absolute index of the oldest entry still there.
    pub fn first(&self) -> u64 {
        self.dropped
    }

    /// Entries in the table now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Its size, in §3.2.1's bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Its capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The entry with absolute index `abs`, if it is still there.
    pub fn get(&self, abs: u64) -> Option<&Entry> {
        let i = abs.checked_sub(self.dropped)?;
        self.entries.get(usize::try_from(i).ok()?)
    }

    /// The absolute index of the entry an encoder instruction means by relative index `rel`
    /// (§3.2.5: 0 is the newest), if it is still there.
    pub fn relative(&self, rel: u64) -> Option<u64> {
        let abs = self.insert_count().checked_sub(1)?.checked_sub(rel)?;
        (abs >= self.dropped).then_some(abs)
    }

    /// How many of the oldest entries must go so that `extra` more bytes fit the capacity;
    /// `None` when they could not fit an empty table.
    pub fn evictions_for(&self, extra: usize) -> Option<usize> {
        let limit = self.capacity.checked_sub(extra)?;
        let mut size = self.size;
        let mut n = 0;
        for e in &self.entries {
            if size <= limit {
                break;
            }
            size -= e.size();
            n += 1;
        }
        Some(n)
    }

    /// How many of the oldest entries must go for the table to fit `capacity`.
    pub fn evictions_to(&self, capacity: usize) -> usize {
        let mut size = self.size;
        let mut n = 0;
        for e in &self.entries {
            if size <= capacity {
                break;
            }
            size -= e.size();
            n += 1;
        }
        n
    }

    fn evict(&mut self, n: usize) {
        for _ in 0..n {
            if let Some(e) = self.entries.pop_front() {
                self.size -= e.size();
                self.dropped += 1;
            }
        }
    }

    /// Sets the capacity, evicting what no longer fits (§3.2.3). Whether that eviction is
    /// allowed is the caller's rule.
    pub fn set_capacity(&mut self, capacity: usize) {
        self.evict(self.evictions_to(capacity));
        self.capacity = capacity;
    }

    /// Adds an entry, evicting the oldest ones to make room (§3.2.2), and returns its
    /// absolute index; `None` (and nothing changed) when it is larger than the capacity.
    pub fn insert(&mut self, entry: Entry) -> Option<u64> {
        let n = self.evictions_for(entry.size())?;
        self.evict(n);
        self.size += entry.size();
        self.entries.push_back(entry);
        Some(self.insert_count() - 1)
    }

    /// The newest entries matching `name: value` whole and by name, as absolute indices.
    pub fn find(&self, name: &[u8], value: &[u8]) -> (Option<u64>, Option<u64>) {
        let mut by_name = None;
        for (i, e) in self.entries.iter().enumerate().rev() {
            if e.name == name {
                let abs = self.dropped + i as u64;
                if e.value == value {
                    return (Some(abs), by_name.or(Some(abs)));
                }
                by_name.get_or_insert(abs);
            }
        }
        (None, by_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, value: &str) -> Entry {
        Entry {
            name: name.into(),
            value: value.into(),
        }
    }

    /// Appendix B's table: capacity 220, four inserts, the fifth evicting the first.
    #[test]
    fn appendix_b_table() {
        let mut t = Table::default();
        t.set_capacity(220);
        assert_eq!(t.insert(entry(":authority", "www.example.com")), Some(0));
        assert_eq!(t.insert(entry(":path", "/sample/path")), Some(1));
        assert_eq!(t.size(), 106);
        assert_eq!(t.insert(entry("custom-key", "custom-value")), Some(2));
        assert_eq!(t.size(), 160);
        // Duplicate of relative index 2: absolute 3 - 2 - 1 = 0.
        assert_eq!(t.relative(2), Some(0));
        let dup = t.get(0).unwrap().clone();
        assert_eq!(t.insert(dup), Some(3));
        assert_eq!(t.size(), 217);
        assert_eq!(t.relative(1), Some(2));
        assert_eq!(t.evictions_for(55), Some(1));
        assert_eq!(t.insert(entry("custom-key", "custom-value2")), Some(4));
        assert_eq!(t.size(), 215);
        assert_eq!((t.first(), t.insert_count(), t.len()), (1, 5, 4));
        assert_eq!(t.get(0), None, "evicted");
        assert_eq!(t.relative(4), None, "relative 4 is absolute 0: gone");
        assert_eq!(t.find(b"custom-key", b"custom-value"), (Some(2), Some(4)));
        assert_eq!(t.find(b":authority", b"x"), (None, Some(3)));
    }

    #[test]
    fn too_large_entries_and_capacity_changes() {
        let mut t = Table::default();
        t.set_capacity(64);
        assert_eq!(t.insert(entry("a", &"x".repeat(32))), None, "65 > 64");
        assert_eq!(t.insert_count(), 0);
        assert_eq!(
            t.insert(entry("a", &"x".repeat(31))),
            Some(0),
            "64 fits exactly"
        );
        t.set_capacity(0);
        assert!(t.is_empty());
        assert_eq!((t.size(), t.first(), t.insert_count()), (0, 1, 1));
        assert_eq!(t.insert(entry("", "")), None, "nothing fits a table of 0");
    }
}
