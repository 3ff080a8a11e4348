//! `POST /reverse` (seed 004): a JSON object in, `{"data": [each value reversed]}` out, in the
//! object's order. Strings are reversed by character, arrays by element, as Python's `x[::-1]`
//! does in the seed; other values cannot be reversed and make the request a 400.

use serde_json::{Map, Value};

/// Writes the reversed values of the JSON object in `body` to `out`, or says why it cannot.
pub(crate) fn reverse(body: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    let object: Map<String, Value> =
        serde_json::from_slice(body).map_err(|_| "body must be a JSON object\n")?;
    let data = object
        .into_iter()
        .map(|(_, v)| match v {
            Value::String(s) => Ok(Value::String(s.chars().rev().collect())),
            Value::Array(mut a) => {
                a.reverse();
                Ok(Value::Array(a))
            }
            _ => Err("values must be strings or arrays\n"),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut reply = Map::with_capacity(1);
    reply.insert("data".to_owned(), Value::Array(data));
    serde_json::to_writer(out, &reply).map_err(|_| "cannot encode reply\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(body: &str) -> Result<String, &'static str> {
        let mut out = Vec::new();
        reverse(body.as_bytes(), &mut out).map(|()| String::from_utf8(out).unwrap())
    }

    #[test]
    fn reverses_in_order() {
        assert_eq!(
            run(r#"{"b": "abc", "a": "héllo", "c": [1, 2]}"#).unwrap(),
            r#"{"data":["cba","olléh",[2,1]]}"#
        );
        assert_eq!(run("{}").unwrap(), r#"{"data":[]}"#);
    }

    #[test]
    fn refuses_what_it_cannot_reverse() {
        assert!(run("[1]").is_err());
        assert!(run("{\"a\": 1}").is_err());
        assert!(run("{\"a\": ").is_err());
        assert!(run("").is_err());
    }
}
