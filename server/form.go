package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"reflect"
	"strings"
)

// decodeBody parses a POST /v1/videos body: JSON, or a multipart form as
// OpenAI's SDKs send one with a file (every field a form value, the
// images files). A form's values become the JSON object they stand for,
// so both go through the same decoding and checks; its image files go to
// the request as bytes, not through base64.
func decodeBody(contentType string, body []byte) (VideoRequest, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" {
		return decodeRequest(body)
	}
	if params["boundary"] == "" {
		return VideoRequest{}, badField("body", "a multipart form without a boundary")
	}
	obj, files, err := formObject(multipart.NewReader(bytes.NewReader(body), params["boundary"]))
	if err != nil {
		return VideoRequest{}, err
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return VideoRequest{}, badField("body", "%v", err)
	}
	r, err := decodeRequest(raw)
	r.files = files
	return r, err
}

// formKinds maps each VideoRequest JSON name to how a form value becomes
// JSON: "string" as text, "list" one element per value, "json" as JSON
// text when it is valid JSON (numbers, keep_alive, lora, budgets), else as
// a string for the decoder to refuse.
var formKinds = func() map[string]string {
	kinds := map[string]string{}
	t := reflect.TypeOf(VideoRequest{})
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case f.Type.Kind() == reflect.String:
			kinds[name] = "string"
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.String:
			kinds[name] = "list"
		default:
			kinds[name] = "json"
		}
	}
	return kinds
}()

// formObject reads a multipart form into the JSON object its values stand
// for, and the files of the image fields (input_reference, last_image) by
// field. A field given twice (other than a list) is refused.
func formObject(mr *multipart.Reader) (map[string]any, map[string][]byte, error) {
	obj, files := map[string]any{}, map[string][]byte{}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return obj, files, nil
		}
		if err != nil {
			return nil, nil, badField("body", "not a multipart form: %v", err)
		}
		name := part.FormName()
		data, err := io.ReadAll(part)
		part.Close()
		if err != nil {
			return nil, nil, badField("body", "not a multipart form: %v", err)
		}
		kind := formKinds[name]
		_, dup := obj[name]
		_, dupFile := files[name]
		if (dup || dupFile) && kind != "list" {
			return nil, nil, badField(name, "given twice")
		}
		switch {
		case part.FileName() != "" && imageFields[name]:
			files[name] = data
		case kind == "list":
			list, _ := obj[name].([]string)
			obj[name] = append(list, string(data))
		case kind == "json" && json.Valid(data):
			obj[name] = json.RawMessage(data)
		default:
			obj[name] = string(data)
		}
	}
}
