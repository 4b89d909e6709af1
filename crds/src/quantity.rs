//! Kubernetes resource quantities ("100m", "1.5", "128Mi", "1G", "1e3") read as exact
//! integers in the unit a sum needs, and sums written back as canonical quantities.
//!
//! Why not a crate: `k8s_quantity_parser` is pinned to k8s-openapi 0.14, and
//! `kube_quantity` parses through `f64` (inexact for large byte counts) and reads a bare
//! suffix such as "Mi" as 0. The grammar is small (k8s.io/apimachinery `resource.Quantity`):
//! `[+-]digits[.digits](Ki|Mi|Gi|Ti|Pi|Ei | n|u|m||k|M|G|T|P|E | (e|E)[+-]digits)`.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The unit a quantity is read in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Whole units: bytes, pods (kube's `Quantity.Value()`).
    One,
    /// Thousandths: CPU millicores (kube's `Quantity.MilliValue()`).
    Milli,
}

/// What is wrong with a quantity string.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not a number with an optional suffix.
    #[error(
        "quantity {0:?} is not a number with an optional suffix (write e.g. 100m, 1.5, 128Mi, 1G or 1e3)"
    )]
    Syntax(String),
    /// Below zero: no request, overhead or allocatable can be.
    #[error("quantity {0:?} is negative; requests and allocatable are zero or more")]
    Negative(String),
    /// Does not fit in a 64-bit count of the unit.
    #[error("quantity {0:?} is out of range (at most 2^63-1 bytes or millicores)")]
    OutOfRange(String),
}

/// `s` in `unit`, rounded up as kube-scheduler rounds (`Value()`/`MilliValue()`).
pub fn parse(s: &str, unit: Unit) -> Result<i64, QuantityError> {
    let range = || QuantityError::OutOfRange(s.to_string());
    let exact = read(s)?;
    if exact.digits == 0 {
        return Ok(0);
    }
    if exact.negative {
        return Err(QuantityError::Negative(s.to_string()));
    }
    let exp10 = exact.exp10 + if unit == Unit::Milli { 3 } else { 0 };
    // value = digits × 2^exp2 × 10^exp10, exactly, then rounded up.
    let scaled = exact
        .digits
        .checked_mul(1u128 << exact.exp2)
        .ok_or_else(range)?;
    let magnitude = if exp10 >= 0 {
        u32::try_from(exp10)
            .ok()
            .and_then(|e| 10u128.checked_pow(e))
            .and_then(|p| scaled.checked_mul(p))
            .ok_or_else(range)?
    } else {
        match u32::try_from(-exp10)
            .ok()
            .and_then(|e| 10u128.checked_pow(e))
        {
            Some(den) => scaled.div_ceil(den),
            // Smaller than one unit, yet more than zero.
            None => 1,
        }
    };
    i64::try_from(magnitude).map_err(|_| range())
}

/// True when `a` and `b` are the same quantity however each is written: "0.5" and
/// "500m", "1Gi" and "1073741824", "1e3" and "1k". kube-apiserver stores a quantity in
/// its canonical form, so a manifest's "0.5" reads back as "500m"; a comparison of the
/// two strings would see a difference that is not one. False when either is not a
/// quantity (or too large to compare exactly).
pub fn same(a: &str, b: &str) -> bool {
    match (read(a), read(b)) {
        (Ok(a), Ok(b)) => a.value() == b.value() && a.value().is_some(),
        _ => false,
    }
}

/// A quantity as written, exactly: `±digits × 2^exp2 × 10^exp10`.
struct Exact {
    negative: bool,
    digits: u128,
    exp2: u32,
    exp10: i64,
}

impl Exact {
    /// The value in units of 10^-9 (kube's smallest scale) with its sign, when that is
    /// an integer that fits; none otherwise (finer than nano, or past 2^127).
    fn value(&self) -> Option<(bool, u128)> {
        if self.digits == 0 {
            return Some((false, 0));
        }
        let scaled = self.digits.checked_mul(1u128 << self.exp2)?;
        let exp10 = self.exp10.checked_add(9)?;
        let magnitude = if exp10 >= 0 {
            scaled.checked_mul(10u128.checked_pow(u32::try_from(exp10).ok()?)?)?
        } else {
            let den = 10u128.checked_pow(u32::try_from(-exp10).ok()?)?;
            if scaled % den != 0 {
                return None;
            }
            scaled / den
        };
        Some((self.negative, magnitude))
    }
}

/// The grammar of a quantity, without rounding or a unit.
fn read(s: &str) -> Result<Exact, QuantityError> {
    let syntax = || QuantityError::Syntax(s.to_string());
    let range = || QuantityError::OutOfRange(s.to_string());
    let (negative, rest) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let number_len = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_len);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return Err(syntax());
    }
    let (exp10, exp2): (i64, u32) = match suffix {
        "" => (0, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        _ => match suffix.strip_prefix(['e', 'E']) {
            Some(e) => (exponent(e).ok_or_else(syntax)?, 0),
            None => return Err(syntax()),
        },
    };
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(Exact {
            negative,
            digits: 0,
            exp2,
            exp10,
        });
    }
    // Trailing zeros of the mantissa move into the exponent, so that "1000000…" with
    // more digits than a u128 holds still reads.
    let trimmed = digits.trim_end_matches('0');
    let zeros = (digits.len() - trimmed.len()) as i64;
    Ok(Exact {
        negative,
        digits: trimmed.parse().map_err(|_| range())?,
        exp2,
        exp10: exp10 - frac.len() as i64 + zeros,
    })
}

/// A signed decimal exponent ("3", "-2", "+12").
fn exponent(e: &str) -> Option<i64> {
    let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Anything past ±10^6 is out of range (or less than one unit) whatever the mantissa,
    // so the exponent is clamped there: adding the suffix's and the fraction's powers
    // of ten to one near i64::MIN/MAX would overflow.
    const LIMIT: i64 = 1_000_000;
    let negative = e.starts_with('-');
    Some(
        e.parse::<i64>()
            .unwrap_or(if negative { -LIMIT } else { LIMIT })
            .clamp(-LIMIT, LIMIT),
    )
}

/// A CPU sum in millicores as kube writes it: "2" when whole, else "1500m".
pub fn cpu(milli: i128) -> Quantity {
    Quantity(if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    })
}

/// A byte sum with the largest binary suffix that divides it ("3Gi", "1536Mi"), else
/// plain bytes.
pub fn bytes(n: i128) -> Quantity {
    const SUFFIXES: [(u32, &str); 6] = [
        (60, "Ei"),
        (50, "Pi"),
        (40, "Ti"),
        (30, "Gi"),
        (20, "Mi"),
        (10, "Ki"),
    ];
    Quantity(
        SUFFIXES
            .iter()
            .find(|(shift, _)| n != 0 && n % (1i128 << shift) == 0)
            .map(|(shift, suffix)| format!("{}{suffix}", n >> shift))
            .unwrap_or_else(|| n.to_string()),
    )
}

/// A count ("110").
pub fn count(n: i128) -> Quantity {
    Quantity(n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_exactly_and_round_up() {
        // (quantity, in units, in thousandths)
        let table: &[(&str, i64, i64)] = &[
            ("0", 0, 0),
            ("1", 1, 1000),
            ("+2", 2, 2000),
            ("100m", 1, 100),
            ("1500m", 2, 1500),
            ("0.5", 1, 500),
            (".25", 1, 250),
            ("2.", 2, 2000),
            ("1.0005", 2, 1001),
            ("250u", 1, 1),
            ("3n", 1, 1),
            ("128Mi", 128 << 20, (128 << 20) * 1000),
            ("1.5Gi", 3 << 29, (3 << 29) * 1000),
            ("1Ki", 1024, 1_024_000),
            ("1Ei", 1 << 60, -1),
            ("1k", 1000, 1_000_000),
            ("1G", 1_000_000_000, 1_000_000_000_000),
            ("1E", 1_000_000_000_000_000_000, -1),
            ("1e3", 1000, 1_000_000),
            ("1E3", 1000, 1_000_000),
            ("15e-1", 2, 1500),
            ("1e+2", 100, 100_000),
            ("1e-300", 1, 1),
            ("0e999", 0, 0),
            ("-0", 0, 0),
            ("00012", 12, 12_000),
            // exponents at the ends of i64: tiny amounts still round up to one unit
            ("1e-9223372036854775808", 1, 1),
            ("1.5e-9223372036854775808", 1, 1),
            ("0.5e-9223372036854775807", 1, 1),
            ("0e9223372036854775807", 0, 0),
        ];
        for &(q, one, milli) in table {
            assert_eq!(parse(q, Unit::One), Ok(one), "{q} in units");
            if milli >= 0 {
                assert_eq!(parse(q, Unit::Milli), Ok(milli), "{q} in thousandths");
            } else {
                assert_eq!(
                    parse(q, Unit::Milli),
                    Err(QuantityError::OutOfRange(q.into())),
                    "{q} in thousandths"
                );
            }
        }
    }

    #[test]
    fn one_quantity_written_two_ways_is_the_same() {
        let table: &[(&str, &str, bool)] = &[
            ("0.5", "500m", true),
            ("1", "1000m", true),
            ("1Gi", "1073741824", true),
            ("1024Mi", "1Gi", true),
            ("1e3", "1k", true),
            ("1.5Gi", "1536Mi", true),
            ("1n", "0.000000001", true),
            ("0", "0m", true),
            ("-0", "0", true),
            ("-1", "-1000m", true),
            ("100000000000000000000", "1e20", true),
            (
                "100000000000000000000000000000000000000000000",
                "1e44",
                false,
            ),
            // different values
            ("1n", "1m", false),
            ("1Gi", "1G", false),
            ("-1", "1", false),
            ("500m", "0.51", false),
            // not quantities, finer than kube keeps, or too large to compare exactly
            ("abc", "abc", false),
            ("1x", "1x", false),
            ("0.1n", "100p", false),
        ];
        for (a, b, want) in table {
            assert_eq!(same(a, b), *want, "{a} against {b}");
            assert_eq!(same(b, a), *want, "{b} against {a}");
        }
    }

    #[test]
    fn bad_quantities_are_refused_with_what_to_write() {
        for q in [
            "", "Mi", "m", ".", "1..2", "1.2.3", "1 Mi", " 1", "1mi", "1KB", "1e", "1e+", "1ee3",
            "--1", "+-1", "1Gi3", "0x10", "1e3m",
        ] {
            let err = parse(q, Unit::One).expect_err(q);
            assert_eq!(err, QuantityError::Syntax(q.into()), "{q}");
            assert!(err.to_string().contains("write e.g. 100m"), "{err}");
        }
        assert_eq!(
            parse("-1", Unit::One),
            Err(QuantityError::Negative("-1".into()))
        );
        for q in [
            "9223372036854775808",
            "8Ei",
            "1e19",
            "1e999999999999",
            "10E",
            "1e9223372036854775807",
            "1.5e9223372036854775807",
            "1e+9223372036854775806",
        ] {
            for unit in [Unit::One, Unit::Milli] {
                let err = parse(q, unit).expect_err(q);
                assert_eq!(err, QuantityError::OutOfRange(q.into()), "{q} in {unit:?}");
                assert!(err.to_string().contains("out of range"), "{err}");
            }
        }
        assert_eq!(parse("9223372036854775807", Unit::One), Ok(i64::MAX));
    }

    #[test]
    fn sums_are_written_as_kube_writes_them() {
        let table: &[(Quantity, &str)] = &[
            (cpu(0), "0"),
            (cpu(2000), "2"),
            (cpu(1500), "1500m"),
            (cpu(1), "1m"),
            (bytes(0), "0"),
            (bytes(3 << 30), "3Gi"),
            (bytes(1536 << 20), "1536Mi"),
            (bytes(1 << 60), "1Ei"),
            (bytes(16 << 60), "16Ei"),
            (bytes(1000), "1000"),
            (bytes(2048), "2Ki"),
            (count(110), "110"),
        ];
        for (got, want) in table {
            assert_eq!(got.0, *want);
        }
        // What is written reads back as the same amount.
        for n in [0i64, 1, 1000, 1536 << 20, 3 << 30, 123_456_789] {
            assert_eq!(parse(&bytes(n.into()).0, Unit::One), Ok(n));
            assert_eq!(parse(&cpu(n.into()).0, Unit::Milli), Ok(n));
        }
    }
}
