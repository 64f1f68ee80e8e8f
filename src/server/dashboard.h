// The web dashboard's server side: where its static files are (ui/ beside the binary, an
// installed share/glassbox/ui, or the ui_dir setting), which request paths name a file there,
// and the content type each is sent with. The pages themselves are plain HTML/CSS/JS under ui/
// in the repository; they read the same HTTP API any client does (/metrics, /v1/..., /admin/...).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace gb::server {

// The directory the dashboard is served from: `configured` when set, else the first of
// <exe_dir>/ui and <exe_dir>/../share/glassbox/ui that holds an index.html. Empty when none
// does; *tried lists every directory looked at, in order (for the message /ui answers with).
std::string find_ui_dir(const std::string& configured, const std::string& exe_dir, std::vector<std::string>* tried);

// The directory of the running binary (/proc/self/exe), or "" when it cannot be read.
std::string executable_dir();

// The file under the UI directory that a path below /ui/ names ("" is index.html): only
// [A-Za-z0-9._-] segments separated by single slashes, none starting with a dot (no "..", no
// hidden files), at most 255 bytes. nullopt: no such file can be named (answered 404).
std::optional<std::string> ui_file_for(const std::string& rel);

// The Content-Type of a dashboard file by its extension (text/html; charset=utf-8, ...);
// nullopt for an extension the dashboard does not use (answered 404, never sniffed).
std::optional<std::string> ui_content_type(const std::string& file);

}  // namespace gb::server
