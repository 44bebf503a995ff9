//! Numbers as calls files write them: decimals read by hand, in place, into nanoseconds.

/// Powers of ten, 10⁰ to 10⁹.
pub(super) const POW10: [u64; 10] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
];

/// A latency: a decimal number of `unit_ns`, or with its own unit (`ns`, `us`, `µs`,
/// `ms`, `s`).
// Always inlined: called once per line, and outlined (as the reading loop grew) the
// call and its result through memory cost ~5 % of reading a line (callgrind).
#[inline(always)]
pub(crate) fn parse_latency(s: &[u8], unit_ns: u64) -> Option<u64> {
    let d = decimal(s)?;
    let unit = match &s[d.end..] {
        b"" => unit_ns,
        b"ns" => 1,
        b"us" | b"\xc2\xb5s" => 1_000,
        b"ms" => 1_000_000,
        b"s" => 1_000_000_000,
        _ => return None,
    };
    d.scale(unit)
}

/// Why `s` is not a latency [`parse_latency`] reads: not a number with a unit it knows,
/// or longer than a replay can count.
#[cold]
pub(super) fn latency_problem(s: &[u8]) -> &'static str {
    let number = [b"ns".as_slice(), b"us", "\u{b5}s".as_bytes(), b"ms", b"s"]
        .iter()
        .find_map(|unit| s.strip_suffix(*unit))
        .unwrap_or(s);
    let digits = number.iter().filter(|b| b.is_ascii_digit()).count();
    let points = number.iter().filter(|&&b| b == b'.').count();
    if digits > 0 && points <= 1 && digits + points == number.len() {
        "too long: a replay counts at most 18446744073709551615ns (about 584 years)"
    } else {
        "expected a number of milliseconds (or with a unit: 12ms, 1.5s, 800us)"
    }
}

/// A decimal number as written: its integer part, the first nine digits of its
/// fraction, and where it ends.
#[derive(Debug, Clone, Copy)]
pub(super) struct Decimal {
    pub(super) int: u64,
    pub(super) int_digits: usize,
    pub(super) frac: u64,
    pub(super) frac_digits: usize,
    pub(super) end: usize,
}

/// The decimal number at the start of `s` (`12`, `12.5`, `.5`, `5.`); `None` without a
/// digit, or past `u64`.
#[inline]
pub(super) fn decimal(s: &[u8]) -> Option<Decimal> {
    let mut i = 0;
    let mut int: u64 = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        int = int.checked_mul(10)?.checked_add(u64::from(s[i] - b'0'))?;
        i += 1;
    }
    let int_digits = i;
    let mut frac: u64 = 0;
    let mut frac_digits = 0usize;
    if i < s.len() && s[i] == b'.' {
        i += 1;
        while i < s.len() && s[i].is_ascii_digit() {
            if frac_digits < 9 {
                frac = frac * 10 + u64::from(s[i] - b'0');
                frac_digits += 1;
            }
            i += 1;
        }
    }
    if int_digits == 0 && frac_digits == 0 {
        return None;
    }
    Some(Decimal {
        int,
        int_digits,
        frac,
        frac_digits,
        end: i,
    })
}

impl Decimal {
    /// The number, in units of `unit` nanoseconds (a power of ten), in nanoseconds.
    #[inline]
    pub(super) fn scale(self, unit: u64) -> Option<u64> {
        let whole = self.int.checked_mul(unit)?;
        let unit_digits = match unit {
            1 => 0,
            1_000 => 3,
            1_000_000 => 6,
            1_000_000_000 => 9,
            _ => POW10.iter().position(|&p| p == unit).unwrap_or(0),
        };
        // frac / 10^digits of a unit; units are powers of ten, so this is a shift of
        // decimals.
        let part = if unit_digits >= self.frac_digits {
            self.frac * POW10[unit_digits - self.frac_digits]
        } else {
            self.frac / POW10[self.frac_digits - unit_digits]
        };
        whole.checked_add(part)
    }
}
