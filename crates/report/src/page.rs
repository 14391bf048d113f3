//! A static page in the run page's style (`report.html`'s stylesheet, no script): for
//! results that are tables and pictures, such as `headlab compare`'s. Pictures are embedded
//! as data URIs, so the page stays one file that opens anywhere, under the same content
//! policy as the run page (no network, no script).

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::ReportError;

/// The run page's stylesheet, and what a static page adds to it: tables scroll sideways
/// instead of overflowing, pictures shrink to the column, failed cells stand out.
const CSS: &str = concat!(
    include_str!("../assets/report.css"),
    "
main table { display: block; max-width: 100%; overflow-x: auto; font-size: 13px; }
main img { display: block; max-width: 100%; height: auto; margin: 0.5em 0; }
td.bad { background: #fde0e0; color: #8a1010; font-weight: 600; }
td.good { color: #1d6b1d; font-weight: 600; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px;
  margin-right: 6px; vertical-align: -1px; }
"
);

/// Escapes text for HTML, inside elements and quoted attributes.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The PNG at `path` as a `data:` URI for an `<img src>`.
pub fn png_data_uri(path: &Path) -> Result<String, ReportError> {
    let bytes = std::fs::read(path).map_err(|e| ReportError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    Ok(format!("data:image/png;base64,{}", BASE64.encode(bytes)))
}

/// A whole page: `title` (escaped here) as the heading, then `body`, HTML the caller built
/// with [`escape`] around every piece of text.
pub fn static_page(title: &str, body: &str) -> String {
    let title = escape(title);
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; img-src data:\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <link rel=\"icon\" href=\"data:,\">\n<title>{title}</title>\n<style>\n{CSS}</style>\n\
         </head>\n<body>\n<header>\n<h1>{title}</h1>\n</header>\n<main>\n{body}</main>\n\
         </body>\n</html>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text is escaped in the title; a picture becomes a data URI of its bytes.
    #[test]
    fn the_page_escapes_its_title_and_embeds_pictures() {
        let page = static_page("a <b> & \"c\"", "<p>x</p>\n");
        assert!(
            page.contains("<h1>a &lt;b&gt; &amp; &quot;c&quot;</h1>"),
            "{page}"
        );
        assert!(page.contains("<main>\n<p>x</p>\n</main>"), "{page}");
        let dir = std::env::temp_dir().join(format!("headlab-page-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let png = dir.join("p.png");
        std::fs::write(&png, [0x89, b'P', b'N', b'G']).unwrap();
        let uri = png_data_uri(&png).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(uri, "data:image/png;base64,iVBORw==");
    }
}
