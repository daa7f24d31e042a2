package server

import (
	"bytes"
	"encoding/base64"
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
// images files). A form becomes the JSON object it stands for, so both go
// through the same decoding and checks.
func decodeBody(contentType string, body []byte) (VideoRequest, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" {
		return decodeRequest(body)
	}
	if params["boundary"] == "" {
		return VideoRequest{}, badField("body", "a multipart form without a boundary")
	}
	obj, err := formObject(multipart.NewReader(bytes.NewReader(body), params["boundary"]))
	if err != nil {
		return VideoRequest{}, err
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return VideoRequest{}, badField("body", "%v", err)
	}
	return decodeRequest(raw)
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

// formObject reads a multipart form into the JSON object it stands for.
// Files in the image fields become base64; a field given twice (other
// than a list) is refused.
func formObject(mr *multipart.Reader) (map[string]any, error) {
	obj := map[string]any{}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return obj, nil
		}
		if err != nil {
			return nil, badField("body", "not a multipart form: %v", err)
		}
		name := part.FormName()
		data, err := io.ReadAll(part)
		part.Close()
		if err != nil {
			return nil, badField("body", "not a multipart form: %v", err)
		}
		kind := formKinds[name]
		if _, dup := obj[name]; dup && kind != "list" {
			return nil, badField(name, "given twice")
		}
		switch {
		case part.FileName() != "" && (name == "input_reference" || name == "last_image"):
			obj[name] = base64.StdEncoding.EncodeToString(data)
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
