//! `POST /reverse` (seed 004, the Python asyncio JSON server): a JSON object in,
//! `{"data": [each value reversed]}` out, in the object's order. "Reversed" is Python's
//! `x[::-1]`, as in the seed: a string by character, an array by its top-level elements (the
//! elements themselves are left as they are, so `[1]` comes back `[1]` and `[[1, 2], 3]` as
//! `[3, [1, 2]]`). Numbers, booleans, null and objects cannot be reversed: 400.

use serde_json::{Map, Value};

/// Writes the reversed values of the JSON object in `body` to `out`, or says why it cannot
/// (the text of the 400 answer: for JSON that does not parse, serde_json's reason and
/// position).
pub(crate) fn reverse(body: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    let object = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(object)) => object,
        Ok(other) => {
            return Err(format!(
                "body must be a JSON object, not {}\n",
                kind_of(&other)
            ))
        }
        Err(e) => return Err(format!("body is not valid JSON: {e}\n")),
    };
    let data = object
        .into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok(Value::String(s.chars().rev().collect())),
            Value::Array(mut a) => {
                a.reverse();
                Ok(Value::Array(a))
            }
            other => Err(format!(
                "cannot reverse {}: {} (only strings and arrays reverse)\n",
                Value::String(k),
                kind_of(&other)
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut reply = Map::with_capacity(1);
    reply.insert("data".to_owned(), Value::Array(data));
    serde_json::to_writer(out, &reply).map_err(|e| format!("cannot encode the reply: {e}\n"))
}

/// "a number", "an array"... for messages.
fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(body: &str) -> Result<String, String> {
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
    fn arrays_reverse_by_top_level_element() {
        assert_eq!(run(r#"{"a": [1]}"#).unwrap(), r#"{"data":[[1]]}"#);
        assert_eq!(
            run(r#"{"a": [[1, 2], "xy", 3]}"#).unwrap(),
            r#"{"data":[[3,"xy",[1,2]]]}"#
        );
    }

    #[test]
    fn says_why_it_cannot_reverse() {
        for (body, why) in [
            (
                "{\"a\": ",
                "body is not valid JSON: EOF while parsing a value at line 1 column 6\n",
            ),
            (
                "{\"a\": x}",
                "body is not valid JSON: expected value at line 1 column 7\n",
            ),
            (
                "",
                "body is not valid JSON: EOF while parsing a value at line 1 column 0\n",
            ),
            (
                "{} {}",
                "body is not valid JSON: trailing characters at line 1 column 4\n",
            ),
            ("[1]", "body must be a JSON object, not an array\n"),
            ("\"s\"", "body must be a JSON object, not a string\n"),
            (
                "{\"a\": 123}",
                "cannot reverse \"a\": a number (only strings and arrays reverse)\n",
            ),
            (
                "{\"b\": \"ok\", \"c\": {}}",
                "cannot reverse \"c\": an object (only strings and arrays reverse)\n",
            ),
        ] {
            assert_eq!(run(body).unwrap_err(), why, "{body}");
        }
    }
}
