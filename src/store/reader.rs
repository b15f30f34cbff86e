//! Reads the little-endian fields of a stored record, front to back; a
//! record cut short is [`Corrupt`], named by what was being read.

use super::corrupt::Corrupt;

pub struct Reader<'a> {
    pub rest: &'a [u8],
    /// What a record cut short is called.
    truncated: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8], truncated: &'static str) -> Self {
        Reader {
            rest: bytes,
            truncated,
        }
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Corrupt> {
        if self.rest.len() < n {
            return Err(Corrupt(self.truncated));
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    pub fn u8(&mut self) -> Result<u8, Corrupt> {
        Ok(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> Result<u32, Corrupt> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    pub fn u64(&mut self) -> Result<u64, Corrupt> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_in_order_and_a_short_record_is_named() {
        let bytes = [7, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 9];
        let mut r = Reader::new(&bytes, "a short thing");
        assert_eq!(r.u8(), Ok(7));
        assert_eq!(r.u32(), Ok(1));
        assert_eq!(r.u64(), Ok(2));
        assert_eq!(r.rest, [9]);
        assert_eq!(r.u32(), Err(Corrupt("a short thing")));
        assert_eq!(r.take(1), Ok(&[9][..]));
    }
}
