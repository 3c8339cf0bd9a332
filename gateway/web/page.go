package web

import (
	"embed"
	"net/http"
)

// static holds the status page: one HTML file, its stylesheet and its
// script, embedded so the page works on a plant network with no way out.
//
//go:embed static
var static embed.FS

// pageHandler serves the status page itself.
func (s *Server) pageHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, static, "static/index.html")
	})
}

// staticHandler serves the stylesheet and script under /static/. They are
// revalidated on every load (no-cache) so that an upgraded gateway never
// serves a page with last version's script.
func (s *Server) staticHandler() http.Handler {
	fs := http.FileServerFS(static)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		fs.ServeHTTP(w, r)
	})
}
