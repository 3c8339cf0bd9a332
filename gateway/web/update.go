package web

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/linemq/linemq/gateway/update"
)

// Updater is the gateway's update slots (gateway/update), for the update
// panel, GET /api/v1/update and bundles uploaded by an admin.
type Updater interface {
	// Status returns the update panel: any value that encodes to a JSON
	// object.
	Status() any
	// Install verifies the bundle read from r and installs it as the
	// version on trial; the gateway then restarts into it. user is the
	// admin who uploaded it, for the log. A bundle refused for what it is
	// returns an *update.Error; one that comes while a version is on
	// trial, an *update.PendingError.
	Install(r io.Reader, user string) (any, error)
}

// Upload bounds.
const (
	// DefaultMaxUpload is the largest bundle accepted unless
	// Options.MaxUpload says otherwise: linemq's program is about 40 MB
	// before compression.
	DefaultMaxUpload = 128 << 20
	// uploadTimeout replaces the server's 10 s read timeout for an upload,
	// which a bundle over a slow plant link takes longer than.
	uploadTimeout = 10 * time.Minute
)

func (s *Server) handleUpdate(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, r, http.StatusOK, s.updateJSON())
}

func (s *Server) updateJSON() any {
	if s.opts.Update == nil {
		return notConfigured{Reason: "updates are not managed by this process"}
	}
	return panelJSON(s.opts.Update.Status, "")
}

// handleUpload installs a bundle sent as the body of POST /api/v1/update.
// It replaces the program the gateway runs, so it needs a logged-in user
// named in update.admins. The body must be application/octet-stream,
// which a page elsewhere cannot make a logged-in browser send without
// asking this server first (a CORS preflight it does not answer).
func (s *Server) handleUpload(w http.ResponseWriter, r *http.Request) {
	if s.opts.Update == nil {
		writeError(w, r, http.StatusNotFound, "updates are not managed by this process")
		return
	}
	lg := s.opts.Login
	if lg == nil || len(lg.Admins) == 0 {
		writeError(w, r, http.StatusForbidden, "uploading a bundle needs a logged-in admin: set update.admins (and auth.password_file), or use linemq update apply on the gateway")
		return
	}
	user, _, _ := r.BasicAuth() // checked by the login before this handler
	if !slices.Contains(lg.Admins, user) {
		writeError(w, r, http.StatusForbidden, "user "+strconv.Quote(user)+" is not one of update.admins")
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/octet-stream" {
		writeError(w, r, http.StatusUnsupportedMediaType, "send the bundle as the body, Content-Type: application/octet-stream (curl --data-binary @FILE)")
		return
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(uploadTimeout))
	rc.SetWriteDeadline(time.Now().Add(uploadTimeout + 30*time.Second))
	limit := s.opts.MaxUpload
	if limit <= 0 {
		limit = DefaultMaxUpload
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	res, err := s.opts.Update.Install(body, user)
	var (
		tooLarge *http.MaxBytesError
		refused  *update.Error
		pending  *update.PendingError
	)
	switch {
	case err == nil:
		s.log.Info("update: bundle uploaded and installed", "user", user, "remote", r.RemoteAddr)
		writeJSON(w, r, http.StatusOK, res)
	case errors.As(err, &tooLarge):
		writeError(w, r, http.StatusRequestEntityTooLarge, "a bundle is at most "+strconv.FormatInt(limit, 10)+" bytes")
	case errors.As(err, &refused):
		s.log.Warn("update: uploaded bundle refused", "user", user, "remote", r.RemoteAddr, "reason", refused.Reason)
		writeError(w, r, http.StatusUnprocessableEntity, err.Error())
	case errors.As(err, &pending):
		writeError(w, r, http.StatusConflict, err.Error())
	default:
		s.log.Error("update: installing an uploaded bundle", "user", user, "err", err)
		writeError(w, r, http.StatusInternalServerError, err.Error())
	}
}
