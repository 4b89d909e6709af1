//! Kubernetes resource quantities (`500m`, `2`, `32Gi`, `1e3`) as integers, the way
//! the scheduler compares them: cpu in millicores, everything else in whole units
//! (both rounded up, as `resource.Quantity`'s `MilliValue`/`Value` do).

/// The regular expression kube-apiserver names when a quantity does not parse.
const FORM: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// Parses `s` and returns its value × 1000 (millis), rounded up.
pub fn parse_milli(s: &str) -> Result<i128, String> {
    let bad = || format!("quantity \"{s}\" is not valid: {FORM}");
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let (num, suffix) = match suffix.strip_prefix(['e', 'E']) {
        Some(exp) if !exp.is_empty() => (num, format!("e{exp}")),
        _ => (num, suffix.to_string()),
    };
    let negative = num.starts_with('-');
    let digits = num.trim_start_matches(['+', '-']);
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if digits.is_empty()
        || num.len() - digits.len() > 1
        || !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit())
        || (int.is_empty() && frac.is_empty())
        || int.len() + frac.len() > 30
    {
        return Err(bad());
    }
    // value = mantissa × base^exp / 10^frac.len(), in millis
    let mantissa: i128 = format!("{int}{frac}").parse().map_err(|_| bad())?;
    let (base, exp): (i128, i32) = match suffix.as_str() {
        "" => (10, 0),
        "n" => (10, -9),
        "u" => (10, -6),
        "m" => (10, -3),
        "k" => (10, 3),
        "M" => (10, 6),
        "G" => (10, 9),
        "T" => (10, 12),
        "P" => (10, 15),
        "E" => (10, 18),
        "Ki" => (2, 10),
        "Mi" => (2, 20),
        "Gi" => (2, 30),
        "Ti" => (2, 40),
        "Pi" => (2, 50),
        "Ei" => (2, 60),
        e if e.starts_with('e') => (10, e[1..].parse::<i32>().map_err(|_| bad())?),
        _ => return Err(bad()),
    };
    let mut num = mantissa;
    let mut den: i128 = 10i128.pow(frac.len() as u32);
    // millis
    num = num.checked_mul(1000).ok_or_else(bad)?;
    if exp >= 0 {
        num = num
            .checked_mul(base.checked_pow(exp as u32).ok_or_else(bad)?)
            .ok_or_else(bad)?;
    } else {
        den = den
            .checked_mul(base.checked_pow((-exp) as u32).ok_or_else(bad)?)
            .ok_or_else(bad)?;
    }
    let v = (num + den - 1) / den;
    Ok(if negative { -v } else { v })
}

/// Parses a quantity that must not be negative; `what` names it in the error.
pub fn parse_non_negative(what: &str, s: &str) -> Result<i128, String> {
    let v = parse_milli(s).map_err(|e| format!("{what}: {e}"))?;
    if v < 0 {
        return Err(format!("{what}: quantity \"{s}\" must not be negative"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_to_millis_rounding_up() {
        for (s, want) in [
            ("0", 0),
            ("1", 1000),
            ("500m", 500),
            ("1.5", 1500),
            ("0.1", 100),
            (".5", 500),
            ("2k", 2_000_000),
            ("1Ki", 1_024_000),
            ("32Gi", 32 * (1i128 << 30) * 1000),
            ("1e3", 1_000_000),
            ("1E3", 1_000_000),
            ("1e-3", 1),
            ("1n", 1),
            ("100u", 1),
            ("1500u", 2),
            ("+3", 3000),
            ("-1", -1000),
        ] {
            assert_eq!(parse_milli(s), Ok(want), "{s}");
        }
    }

    #[test]
    fn bad_quantities_name_the_expected_form() {
        for s in [
            "", "abc", "1x", "8 cores", "1..2", "--1", "Gi", "1Gix", "1e",
        ] {
            let e = parse_milli(s).unwrap_err();
            assert!(
                e.contains(&format!("\"{s}\"")) && e.contains("regular expression"),
                "{s}: {e}"
            );
        }
        let e = parse_non_negative("--node-cpu", "-2").unwrap_err();
        assert!(e.contains("--node-cpu") && e.contains("negative"), "{e}");
    }
}
