//! Reading and writing NumPy `.npy` files (format version 1.0, C order, little endian).
//!
//! The golden cases are stored as `.npy` so that numpy writes them and anyone can inspect
//! them. bf16 has no NumPy dtype: bf16 arrays are stored as `<u2` bit patterns, and
//! f8e4m3 ones as `|u1` bit patterns.

use crate::ast::DType;

/// An array read from or written to a `.npy` file, widened to `f64` values.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    /// Extents, outermost first.
    pub shape: Vec<usize>,
    /// The element type the values represent.
    pub dtype: DType,
    /// Values in row-major order.
    pub data: Vec<f64>,
}

/// Errors reading `.npy` data.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    /// Not a `.npy` file, or a layout this reader does not take.
    #[error("{0}")]
    Format(String),
    /// I/O.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

fn descr(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::BF16 => "<u2",
        DType::I8 => "|i1",
        DType::F8E4M3 => "|u1",
        DType::I32 => "<i4",
    }
}

/// Bytes per element of `dtype` in memory (and in `.npy` files).
pub fn width(dtype: DType) -> usize {
    dtype.bytes() as usize
}

/// The in-memory little-endian encoding of `data` as `dtype` (what a CUDA buffer holds).
pub fn encode(dtype: DType, data: &[f64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() * width(dtype));
    for &v in data {
        match dtype {
            DType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
            DType::F16 => out.extend_from_slice(&half::f16::from_f64(v).to_bits().to_le_bytes()),
            DType::BF16 => out.extend_from_slice(&half::bf16::from_f64(v).to_bits().to_le_bytes()),
            DType::I8 => out.push(v as i8 as u8),
            DType::F8E4M3 => out.push(crate::interp::e4m3_bits(v)),
            DType::I32 => out.extend_from_slice(&(v as i32).to_le_bytes()),
        }
    }
    out
}

/// Decodes little-endian `dtype` elements (trailing bytes that do not fill one are ignored).
pub fn decode(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    bytes.chunks_exact(width(dtype)).map(|c| match dtype {
        DType::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
        DType::I32 => i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
        DType::F16 => half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64(),
        DType::BF16 => half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64(),
        DType::I8 => c[0] as i8 as f64,
        DType::F8E4M3 => crate::interp::e4m3_value(c[0]),
    }).collect()
}

impl Array {
    /// Serialises to `.npy` bytes (deterministic: the same array gives the same bytes).
    pub fn to_npy(&self) -> Vec<u8> {
        let shape = match self.shape.len() {
            1 => format!("({},)", self.shape[0]),
            _ => format!("({})", self.shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
        };
        let mut header = format!("{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}", descr(self.dtype));
        let total = 10 + header.len() + 1;
        header.push_str(&" ".repeat((64 - total % 64) % 64));
        header.push('\n');
        let mut out = Vec::new();
        out.extend_from_slice(b"\x93NUMPY\x01\x00");
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(&encode(self.dtype, &self.data));
        out
    }

    /// Writes a `.npy` file.
    pub fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        // A temporary file in the same folder, renamed into place: never a half-written array.
        crate::output::staged_copy(path, &self.to_npy())?.persist(path).map(|_| ()).map_err(|e| e.error)
    }

    /// Parses `.npy` bytes; `dtype` says what the file's elements mean (bf16 is `<u2`).
    pub fn from_npy(bytes: &[u8], dtype: DType) -> Result<Array, NpyError> {
        let bad = |m: &str| NpyError::Format(m.to_string());
        if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
            return Err(bad("not a .npy file"));
        }
        let (hlen, start) = match bytes[6] {
            1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
            2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
            _ => return Err(bad("unsupported .npy version")),
        };
        let header = std::str::from_utf8(bytes.get(start..start + hlen).ok_or_else(|| bad("truncated header"))?).map_err(|_| bad("header is not text"))?;
        let field = |key: &str| -> Option<&str> {
            let at = header.find(&format!("'{key}':"))? + key.len() + 3;
            Some(header[at..].trim_start())
        };
        let d = field("descr").ok_or_else(|| bad("no descr"))?;
        if !d.starts_with(&format!("'{}'", descr(dtype))) {
            return Err(NpyError::Format(format!("expected dtype {} for {dtype}, found {}", descr(dtype), d.split(',').next().unwrap_or(""))));
        }
        if field("fortran_order").is_some_and(|f| f.starts_with("True")) {
            return Err(bad("Fortran-ordered arrays are not supported"));
        }
        let s = field("shape").ok_or_else(|| bad("no shape"))?;
        let inner = s.strip_prefix('(').and_then(|s| s.split(')').next()).ok_or_else(|| bad("bad shape"))?;
        let shape: Vec<usize> = inner.split(',').map(str::trim).filter(|x| !x.is_empty())
            .map(|x| x.parse::<usize>().map_err(|_| bad("bad shape"))).collect::<Result<_, _>>()?;
        let n: usize = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or_else(|| bad("shape too large"))?;
        let body = &bytes[start + hlen..];
        let width = width(dtype);
        if body.len() != n.checked_mul(width).ok_or_else(|| bad("shape too large"))? {
            return Err(NpyError::Format(format!("expected {} bytes of data, found {}", n * width, body.len())));
        }
        Ok(Array { shape, dtype, data: decode(dtype, body) })
    }

    /// Reads a `.npy` file.
    pub fn read(path: &std::path::Path, dtype: DType) -> Result<Array, NpyError> {
        Array::from_npy(&std::fs::read(path)?, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_dtype() {
        for dtype in DType::ALL {
            let a = Array { shape: vec![2, 3], dtype, data: vec![1.0, -2.0, 3.0, 0.5, 0.0, 7.0] };
            let bytes = a.to_npy();
            assert_eq!((bytes.len() - a.data.len() * match dtype { DType::F32 | DType::I32 => 4, DType::I8 | DType::F8E4M3 => 1, _ => 2 }) % 64, 0);
            let b = Array::from_npy(&bytes, dtype).unwrap();
            let want: Vec<f64> = if dtype.is_float() { a.data.clone() } else { vec![1.0, -2.0, 3.0, 0.0, 0.0, 7.0] };
            assert_eq!(b.data, want, "{dtype}");
            assert_eq!(b.shape, vec![2, 3]);
        }
    }

    #[test]
    fn rejects_the_wrong_dtype() {
        let a = Array { shape: vec![4], dtype: DType::F32, data: vec![0.0; 4] };
        assert!(Array::from_npy(&a.to_npy(), DType::F16).is_err());
    }
}
