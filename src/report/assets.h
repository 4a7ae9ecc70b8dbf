// Private to the report module: the files embedded into every report page at build time
// (embed_assets.cmake): the chart library dygraphs' script and style sheet (Debian's
// libjs-dygraphs, /usr/share/javascript/dygraphs) and the page's own script and style sheet
// (src/report/web).
#ifndef TRAINSCOPE_REPORT_ASSETS_H_
#define TRAINSCOPE_REPORT_ASSETS_H_

#include <string_view>

namespace trainscope::report {

std::string_view AssetDygraphJs();
std::string_view AssetDygraphCss();
std::string_view AssetReportJs();
std::string_view AssetReportCss();

}  // namespace trainscope::report

#endif  // TRAINSCOPE_REPORT_ASSETS_H_
